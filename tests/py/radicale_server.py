"""Radicale for tests/caldav.rs, optionally behind a Nextcloud-style path prefix.

Usage: radicale_server.py CONFIG PORT [PREFIX]

Without PREFIX this serves Radicale at the root, as `python -m radicale` would. With PREFIX (e.g.
/remote.php/dav) Radicale is mounted below it (WSGI SCRIPT_NAME, so its hrefs carry the prefix)
and /.well-known/caldav redirects there, which is how a Nextcloud server is laid out.
"""
import sys
from socketserver import ThreadingMixIn
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

import radicale
from radicale import config

config_path, port = sys.argv[1], int(sys.argv[2])
prefix = sys.argv[3].rstrip("/") if len(sys.argv) > 3 else ""
dav = radicale.Application(config.load([(config_path, False)]))


def app(environ, start_response):
    path = environ.get("PATH_INFO", "")
    if prefix and path.rstrip("/") == "/.well-known/caldav":
        start_response("301 Moved Permanently", [("Location", prefix + "/")])
        return [b""]
    if prefix:
        if path != prefix and not path.startswith(prefix + "/"):
            start_response("404 Not Found", [("Content-Type", "text/plain")])
            return [b"not found"]
        environ["SCRIPT_NAME"] = prefix
        environ["PATH_INFO"] = path[len(prefix):] or "/"
    return dav(environ, start_response)


class Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class QuietHandler(WSGIRequestHandler):
    def log_message(self, *args):
        pass


make_server("127.0.0.1", port, app, server_class=Server, handler_class=QuietHandler).serve_forever()
