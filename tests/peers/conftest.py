"""Fixtures of the peer tests: a guard that records (and stops) any connection off this machine."""

from __future__ import annotations

import socket

import pytest

_LOOPBACK = {"127.0.0.1", "::1", "localhost"}


@pytest.fixture
def no_network(monkeypatch):
    """Every attempt to connect to or resolve a host other than loopback, refused and listed."""
    attempts: list[str] = []
    connect, resolve = socket.socket.connect, socket.getaddrinfo

    def guarded_connect(sock, address):
        if isinstance(address, tuple) and address[0] not in _LOOPBACK:
            attempts.append(f"connect {address}")
            raise OSError(f"the test forbids leaving the machine ({address})")
        return connect(sock, address)

    def guarded_resolve(host, *args, **kwargs):
        if host not in _LOOPBACK and host is not None:
            attempts.append(f"resolve {host}")
            raise socket.gaierror(f"the test forbids resolving {host}")
        return resolve(host, *args, **kwargs)

    monkeypatch.setattr(socket.socket, "connect", guarded_connect)
    monkeypatch.setattr(socket, "getaddrinfo", guarded_resolve)
    return attempts
