"""Real services the tests start and stop themselves (no mocks where a real one can run)."""

import socket


def free_port(host: str = "127.0.0.1") -> int:
    """A port nobody listens on right now (the OS picks it; a server started next binds it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]
