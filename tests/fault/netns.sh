#!/usr/bin/env bash
# Runs a command with two fake hosts: network namespaces weft-a and weft-b joined by a veth
# pair (10.199.0.1 and 10.199.0.2, private to this machine's test run). Ranks enter them
# through WEFT_TEST_NETNS (bench/launch.c). Exits 77 (skipped) where namespaces cannot be made.
# usage: tests/fault/netns.sh COMMAND...
set -uo pipefail
a=weft-a-$$ b=weft-b-$$
cleanup() { ip netns del "$a" 2> /dev/null; ip netns del "$b" 2> /dev/null; }
trap cleanup EXIT
if ! { ip netns add "$a" && ip netns add "$b" &&
       ip link add "va$$" type veth peer name "vb$$" &&
       ip link set "va$$" netns "$a" && ip link set "vb$$" netns "$b" &&
       ip -n "$a" addr add 10.199.0.1/24 dev "va$$" && ip -n "$b" addr add 10.199.0.2/24 dev "vb$$" &&
       ip -n "$a" link set "va$$" up && ip -n "$b" link set "vb$$" up &&
       ip -n "$a" link set lo up && ip -n "$b" link set lo up; } 2> /dev/null; then
  echo "netns.sh: cannot create network namespaces here (needs root and iproute2): skipped"
  exit 77
fi
WEFT_TEST_NETNS="$a,$b" "$@"
