"""A real WebDAV server (wsgidav on cheroot) for voxgate's file-tool tests.

Usage: wsgidav_server.py ROOT USER PASSWORD
Serves ROOT at http://127.0.0.1:PORT/dav/ with basic auth for USER, on a free loopback port, and
prints "PORT <n>" once it accepts connections. Exits when stdin closes (the test process ended), so
no server outlives its test binary.
"""

import os
import sys
import threading

from cheroot import wsgi
from wsgidav.wsgidav_app import WsgiDAVApp


def main() -> None:
    root, user, password = sys.argv[1:4]
    config = {
        "provider_mapping": {"/dav": root},
        "simple_dc": {"user_mapping": {"*": {user: {"password": password}}}},
        "http_authenticator": {"accept_basic": True, "accept_digest": False, "default_to_digest": False},
        "verbose": 1,
        "logging": {"enable_loggers": []},
        "property_manager": True,
        "lock_storage": True,
    }
    app = WsgiDAVApp(config)
    server = wsgi.Server(("127.0.0.1", 0), app, numthreads=8)
    server.prepare()
    print(f"PORT {server.bind_addr[1]}", flush=True)

    def stop_when_parent_goes() -> None:
        sys.stdin.read()
        os._exit(0)

    threading.Thread(target=stop_when_parent_goes, daemon=True).start()
    server.serve()


if __name__ == "__main__":
    main()
