"""Pin the image of a production overlay by digest, or check that it is pinned.

    python tools/pin_image.py deploy/overlays/azure sha256:<64 hex>   # after pushing: write image/kustomization.yaml
    python tools/pin_image.py deploy/overlays/azure --check           # before applying: refuse a tag without digest

The overlay takes its image from the component ``image/`` (a kustomize ``images:`` entry this tool writes whole),
so a release pins exactly what it pushed and nothing else in the overlay is rewritten. ``--check`` renders the
overlay with ``kubectl kustomize`` and refuses any container image that is not ``name@sha256:<digest>``: a tag can
be moved to other bytes, a digest cannot. The digest is only known once the image is pushed, so the committed
overlay carries the release's tag until then, and ``--check`` refuses it.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

IMAGE = "ghcr.io/rubric-monitor/rubric-monitor"
DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")
PINNED = re.compile(r"@sha256:[0-9a-f]{64}$")
HEADER = ("# Written by tools/pin_image.py: the image this overlay deploys. A release pins it by digest\n"
          "# (python tools/pin_image.py <overlay> sha256:...); tools/pin_image.py --check refuses a tag alone.\n")


def write(overlay: Path, digest: str) -> None:
    component = {"apiVersion": "kustomize.config.k8s.io/v1alpha1", "kind": "Component",
                 "images": [{"name": IMAGE, "digest": digest}]}
    (overlay / "image").mkdir(exist_ok=True)
    (overlay / "image" / "kustomization.yaml").write_text(HEADER + yaml.safe_dump(component, sort_keys=False),
                                                         encoding="utf-8")


def unpinned(overlay: Path) -> list[str]:
    kubectl = shutil.which("kubectl") or str(Path(sys.executable).with_name("kubectl"))
    rendered = subprocess.run([kubectl, "kustomize", str(overlay)], capture_output=True, text=True, check=True)
    images = []
    for document in yaml.safe_load_all(rendered.stdout):
        spec = ((document or {}).get("spec") or {}).get("template", {}).get("spec", {})
        for container in spec.get("containers", []) + spec.get("initContainers", []):
            images.append(container["image"])
    return [image for image in images if not PINNED.search(image)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("overlay", type=Path)
    parser.add_argument("digest", nargs="?", help="sha256:<64 hex> of the pushed image")
    parser.add_argument("--check", action="store_true", help="refuse an image without a digest")
    args = parser.parse_args(argv)
    if args.check:
        missing = unpinned(args.overlay)
        for image in missing:
            sys.stderr.write(f"{args.overlay}: image {image} has no digest; pin it with tools/pin_image.py\n")
        return 1 if missing else 0
    if not args.digest or not DIGEST.match(args.digest):
        sys.stderr.write(f"digest {args.digest!r} is not sha256:<64 lowercase hex>\n")
        return 2
    write(args.overlay, args.digest)
    return 0


if __name__ == "__main__":
    sys.exit(main())
