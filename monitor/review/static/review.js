// Keyboard shortcuts of the review page (served from this origin: the Content-Security-Policy allows no inline
// script). The page works without it; this only saves reaching for the mouse.
//   queue:  Enter or o  open the next unlabelled verdict
//   review: 1-5 score the current dimension, n or 0 not applicable (then the next dimension), j/k next/previous
//           dimension, p pass, f fail, s save and go to the next, ? this help
"use strict";
(function () {
  var current = 0;

  function dimensions() {
    return Array.prototype.slice.call(document.querySelectorAll("fieldset.dimension"));
  }

  function focusDimension(index) {
    var all = dimensions();
    if (!all.length) { return; }
    current = Math.max(0, Math.min(index, all.length - 1));
    all.forEach(function (field, i) { field.classList.toggle("active", i === current); });
    all[current].scrollIntoView({block: "nearest"});
  }

  function choose(name, value) {
    var inputs = document.getElementsByName(name);
    for (var i = 0; i < inputs.length; i++) {
      if (inputs[i].value === value) { inputs[i].checked = true; return true; }
    }
    return false;
  }

  function toggleHelp() {
    var help = document.getElementById("keys-help");
    if (help) { help.hidden = !help.hidden; return; }
    help = document.createElement("aside");
    help.id = "keys-help";
    help.textContent = "Queue: Enter opens the next unlabelled. Review: 1-5 score the highlighted dimension, " +
      "n or 0 not applicable, j/k next/previous dimension, p pass, f fail, s save and next.";
    document.body.appendChild(help);
  }

  document.addEventListener("keydown", function (event) {
    var target = event.target;
    if (event.ctrlKey || event.metaKey || event.altKey) { return; }
    if (target && (target.tagName === "TEXTAREA" || target.tagName === "SELECT" ||
        (target.tagName === "INPUT" && target.type !== "radio"))) { return; }
    var key = event.key;
    if (key === "?") { toggleHelp(); event.preventDefault(); return; }
    var form = document.getElementById("label-form");
    if (!form) {
      var start = document.getElementById("start");
      if (start && (key === "Enter" || key === "o")) { start.click(); event.preventDefault(); }
      return;
    }
    var all = dimensions();
    if (/^[1-5]$/.test(key) || key === "n" || key === "0") {
      if (!all.length) { return; }
      var name = all[current].querySelector("input").name;
      choose(name, (key === "n" || key === "0") ? "na" : key);
      focusDimension(current + 1);
    } else if (key === "j") {
      focusDimension(current + 1);
    } else if (key === "k") {
      focusDimension(current - 1);
    } else if (key === "p") {
      choose("passed", "pass");
    } else if (key === "f") {
      choose("passed", "fail");
    } else if (key === "s") {
      if (form.reportValidity()) { form.submit(); }
    } else {
      return;
    }
    event.preventDefault();
  });

  document.addEventListener("DOMContentLoaded", function () { focusDimension(0); });
})();
