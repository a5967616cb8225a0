from monitor import shutdown

shutdown.install()  # before the heavy imports: a SIGTERM during start-up is a clean stop, not a kill

from monitor.cli import main  # noqa: E402

raise SystemExit(main())
