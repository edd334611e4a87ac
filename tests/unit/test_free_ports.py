"""Ports for the servers Squall starts itself (the local cluster's slots, the embedded ZooKeeper)
lie below the kernel's ephemeral range and Kubernetes' NodePort range, where neither another
process's bind(0) nor an outgoing connection can be given one before the server binds it."""

import random
import socket

from squall.ports import _NODE_PORT_FLOOR, _SLOT_PORT_FLOOR, _ephemeral_floor, free_ports


def test_slot_ports_are_distinct_free_and_below_the_ephemeral_range():
    ports = free_ports(12, rng=random.Random(7))
    assert len(set(ports)) == 12
    assert all(_SLOT_PORT_FLOOR <= p < min(_ephemeral_floor(), _NODE_PORT_FLOOR) for p in ports)
    socks = []
    try:
        for p in ports:
            s = socket.socket()
            socks.append(s)
            s.bind(("127.0.0.1", p))
    finally:
        for s in socks:
            s.close()


def test_a_port_in_use_is_skipped():
    first = free_ports(1, rng=random.Random(3))[0]
    held = socket.socket()
    held.bind(("127.0.0.1", first))
    held.listen()
    try:
        again = free_ports(3, rng=random.Random(3))
        assert first not in again
        assert len(set(again)) == 3
    finally:
        held.close()
