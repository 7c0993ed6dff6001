#!/usr/bin/env bash
# Runs a command with two fake hosts: network namespaces weft-a and weft-b joined by a veth
# pair (10.199.0.1 and 10.199.0.2, private to this machine's test run). Ranks enter them
# through WEFT_TEST_NETNS (bench/launch.c); WEFT_TEST_NETNS_LINKS names each one's end of the
# pair (a test may cut it). WEFT_TEST_LOSS=P drops P% of the packets each namespace sends
# (nftables; this kernel has no netem), WEFT_TEST_RATE=100mbit shapes both ends (tc tbf).
# Where namespaces cannot be made it fails (CI can make them), unless WEFT_TEST_NETNS_OPTIONAL=1
# (then it exits 77: skipped).
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
  echo "netns.sh: cannot create network namespaces here (needs root and iproute2)"
  [ "${WEFT_TEST_NETNS_OPTIONAL:-0}" = 1 ] && exit 77
  exit 1
fi
if [ -n "${WEFT_TEST_LOSS:-}" ]; then
  for ns in "$a" "$b"; do
    printf 'table inet weft {\n chain out {\n  type filter hook output priority 0;\n  %s\n }\n}\n' \
      "numgen random mod 100 < $WEFT_TEST_LOSS counter drop" | ip netns exec "$ns" nft -f - ||
      { echo "netns.sh: dropping $WEFT_TEST_LOSS% with nftables failed"; exit 1; }
  done
fi
if [ -n "${WEFT_TEST_RATE:-}" ]; then
  tc -n "$a" qdisc add dev "va$$" root tbf rate "$WEFT_TEST_RATE" burst 64kb latency 100ms &&
    tc -n "$b" qdisc add dev "vb$$" root tbf rate "$WEFT_TEST_RATE" burst 64kb latency 100ms ||
    { echo "netns.sh: tc tbf rate $WEFT_TEST_RATE failed"; exit 1; }
fi
WEFT_TEST_NETNS="$a,$b" WEFT_TEST_NETNS_LINKS="va$$,vb$$" "$@"
rc=$?
if [ -n "${WEFT_TEST_LOSS:-}" ]; then # the drops happened: say how many
  for ns in "$a" "$b"; do
    echo "netns.sh: $ns dropped $(ip netns exec "$ns" nft list ruleset | grep -o 'packets [0-9]*')"
  done
fi
exit $rc
