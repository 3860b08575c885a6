#!/usr/bin/env bash
# Install the Debian packages the test suite starts real servers from (PostgreSQL,
# MariaDB, ZooKeeper and a JRE) or fakes faults with (iproute2, and iptables for the
# network-namespace lab in testbed/netfaults), the SPIN model checker, HashiCorp Serf (the
# gossip baseline of benchmarks.detection and benchmarks.accuracy) and the headless browser
# the dashboard test drives (chromium, chromium-driver), but only those that are missing, and
# only as root.
# The tests start throwaway instances themselves; no system service is enabled.
set -euo pipefail

missing=()
ls /usr/lib/postgresql/*/bin/pg_ctl >/dev/null 2>&1 || missing+=(postgresql)
command -v mariadbd >/dev/null 2>&1 || [ -x /usr/sbin/mariadbd ] || missing+=(mariadb-server)
[ -f /usr/share/zookeeper/bin/zkServer.sh ] || missing+=(zookeeper)
command -v java >/dev/null 2>&1 || missing+=(default-jre-headless)
command -v tc >/dev/null 2>&1 || missing+=(iproute2)
command -v iptables >/dev/null 2>&1 || [ -x /usr/sbin/iptables ] || missing+=(iptables)
command -v spin >/dev/null 2>&1 || missing+=(spin)
# the dashboard's browser test (Selenium drives Debian's headless Chromium)
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
command -v chromedriver >/dev/null 2>&1 || missing+=(chromium-driver)
command -v serf >/dev/null 2>&1 || missing+=(serf)

if [ ${#missing[@]} -eq 0 ]; then
    echo "system packages: all present"
    exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
    echo "system packages missing: ${missing[*]}; run as root or install them with apt-get" >&2
    exit 0
fi
echo "system packages: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
# Never start the packaged services: the tests run their own throwaway instances.
printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d
chmod +x /usr/sbin/policy-rc.d
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
