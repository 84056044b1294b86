"""Python source that a test's child process runs first: every resolution or connection to an address other than
loopback is reported on stderr ("NETWORK ATTEMPT: ...") and refused, so a test can show that a Ratchet process
reaches for nothing outside the machine unless configured to. Append what the child should run."""

GUARD_PRELUDE = """
import socket, sys
LOOPBACK = {"127.0.0.1", "::1", "localhost", None}
def refuse(what):
    print(f"NETWORK ATTEMPT: {what}", file=sys.stderr, flush=True)
    raise OSError(f"network blocked by the test: {what}")
real_getaddrinfo = socket.getaddrinfo
def getaddrinfo(host, *args, **kwargs):
    if host not in LOOPBACK:
        refuse(f"resolve {host}")
    return real_getaddrinfo(host, *args, **kwargs)
socket.getaddrinfo = getaddrinfo
real_connect, real_connect_ex = socket.socket.connect, socket.socket.connect_ex
def guarded(real):
    def connect(self, address):
        if self.family in (socket.AF_INET, socket.AF_INET6) and address[0] not in LOOPBACK:
            refuse(f"connect {address[0]}")
        return real(self, address)
    return connect
socket.socket.connect, socket.socket.connect_ex = guarded(real_connect), guarded(real_connect_ex)
"""
