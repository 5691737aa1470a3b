"""The partitionable network's pure parts: how a command is started on a host, which address
pairs a rule drops, how rules read, and the record kept in the stack's state."""

from __future__ import annotations

import pytest

from outboxkit_workshop.devstack.network import (
    LinkRule,
    Network,
    NetworkError,
    address_of,
    rule_of,
)
from outboxkit_workshop.devstack.processes import LOOPBACK, Host


def net() -> Network:
    return Network(id="abc123", subnet="10.50.7", nodes={"postgres": 2, "kafka-1": 3, "kafka-2": 4})


def test_on_loopback_a_command_starts_as_given_and_switches_user_itself():
    assert LOOPBACK.wrap(["java", "-version"], "postgres") == (["java", "-version"], "postgres")


def test_in_a_namespace_the_command_enters_it_and_drops_to_its_user_inside():
    host = Host("10.50.7.2", "okabc123-postgres")
    argv, user = host.wrap(["postgres", "-D", "x"], "postgres")
    assert argv[:4] == ["ip", "netns", "exec", "okabc123-postgres"]
    assert "--reuid=postgres" in argv and argv[-3:] == ["postgres", "-D", "x"]
    assert user is None  # ip netns exec needs root: the switch happens inside it
    assert host.wrap(["sleep", "1"]) == (
        ["ip", "netns", "exec", "okabc123-postgres", "sleep", "1"],
        None,
    )


def test_a_cut_both_ways_drops_each_pair_in_both_directions():
    pairs = net()._pairs(LinkRule(("kafka-1",), ("kafka-2", "postgres")))
    assert sorted(pairs) == sorted(
        [
            ("10.50.7.3", "10.50.7.4"),
            ("10.50.7.3", "10.50.7.2"),
            ("10.50.7.4", "10.50.7.3"),
            ("10.50.7.2", "10.50.7.3"),
        ]
    )


def test_a_one_way_cut_drops_only_the_packets_from_its_sources():
    pairs = net()._pairs(LinkRule(("postgres",), ("kafka-1", "tools"), oneway=True))
    assert pairs == [("10.50.7.2", "10.50.7.3"), ("10.50.7.2", "10.50.7.1")]


def test_a_node_is_never_cut_from_itself_and_unknown_nodes_are_refused():
    assert net()._pairs(LinkRule(("kafka-1",), ("kafka-1",))) == []
    with pytest.raises(NetworkError, match="no node 'kafka-9'"):
        net()._pairs(LinkRule(("kafka-9",), ("kafka-1",)))


def test_rules_read_as_what_they_do():
    assert LinkRule(("a",), ("b", "c")).describe() == "a <-> b+c: cut"
    slow = LinkRule(("a",), ("b",), oneway=True, cut=False, delay=0.2, jitter=0.05, loss=0.01)
    assert slow.describe() == "a -> b: delay 200±50 ms, loss 1.0%"


def test_the_record_in_the_state_file_gives_the_same_network_back():
    network = net()
    network.shapers = {1: 4242}
    network.rules = [
        {
            "sources": ["a"],
            "targets": ["b"],
            "oneway": False,
            "cut": True,
            "delay": 0.0,
            "jitter": 0.0,
            "loss": 0.0,
        }
    ]
    again = Network.from_dict(network.as_dict())
    assert again == network
    assert rule_of(again.rules[0]) == LinkRule(("a",), ("b",))
    assert address_of(network.as_dict(), "kafka-2") == "10.50.7.4"
    assert address_of(None, "kafka-2") == "127.0.0.1"
    assert network.namespace("kafka-2") == "okabc123-kafka-2"
    assert len(network.tools_interface) <= 15  # Linux's limit for an interface name
