#!/bin/busybox sh
# The VM guest's /init (tests/vm/vm_guest_interop_test.py). busybox only.
# Every result goes to the serial console as a line "NST: WHAT key=value",
# "NST: FAIL WHAT ..." when a step fails; the test parses them and checks
# every value (it does not trust this script's own verdicts). Its inputs
# come from the kernel command line, which puts name=value words into
# init's environment:
#   nst_name   a name to resolve through the DNS server the lease names
#   nst_http   HOST:PORT of the HTTP server serving /hello.txt and /dl.bin
#   nst_http6  [ADDR]:PORT of the same server over IPv6 (optional)
# After the downloads it serves /www (dl.bin as up.bin) with busybox httpd
# on port 80 and waits to be killed; it powers off after 10 minutes.
export PATH=/bin
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
up() { cut -d' ' -f1 /proc/uptime; }
say() { echo "NST: $*"; }
fail() { echo "NST: FAIL $*"; }
trap 'poweroff -f' EXIT
say init up=$(up)

for m in virtio_ring virtio virtio_pci_modern_dev virtio_pci_legacy_dev \
         virtio_pci failover net_failover virtio_net; do
  insmod /lib/modules/$m.ko || fail insmod $m
done
ip link set lo up
i=0
while [ ! -e /sys/class/net/eth0 ] && [ $i -lt 100 ]; do
  sleep 0.1; i=$((i + 1))
done
ip link set eth0 up || fail link
say link up=$(up) mac=$(cat /sys/class/net/eth0/address)

# The offloads virtio-net negotiated (Debian's ethtool, when the harness
# put it in; tests/vm/vm_harness.py).
if [ -x /usr/sbin/ethtool ]; then
  k=$(/usr/sbin/ethtool -k eth0 2>&1)
  get() { echo "$k" | awk -v f="$1:" '$1 == f { print $2; exit }'; }
  say offload tso=$(get tcp-segmentation-offload) \
      txcsum=$(get tx-checksumming) rxcsum=$(get rx-checksumming) \
      lro=$(get large-receive-offload) gro=$(get generic-receive-offload)
fi

# DHCP: udhcpc quits once it has a lease (-q) and fails without one (-n).
udhcpc -i eth0 -f -q -n -t 20 -T 1 -s /etc/udhcpc.sh >/dev/null 2>&1 ||
  fail lease

# DNS, through the server udhcpc wrote into /etc/resolv.conf.
addr=$(timeout 10 nslookup -type=a "$nst_name" 2>&1 |
       awk '/^Name:/ { n = 1 } n && /^Address/ { print $2; exit }')
if [ -n "$addr" ]; then
  say dns name=$nst_name addr=$addr server=$(awk '{ print $2; exit }' \
      /etc/resolv.conf) up=$(up)
else
  fail dns "$nst_name"
fi

# The first fetch (IPv4): the end of boot-to-network.
if timeout 20 wget -q -O /tmp/hello.txt "http://$nst_http/hello.txt"; then
  say fetch text=$(cat /tmp/hello.txt) up=$(up)
else
  fail fetch
fi

# SLAAC: the kernel configures eth0 from the router advertisement; wait
# until an address that is not link-local (QEMU's user network advertises
# fec0::/64, site scope) has passed duplicate address detection.
i=0; a6=
while [ $i -lt 150 ]; do
  a6=$(ip -6 addr show dev eth0 | grep -v -e tentative -e 'scope link' |
       awk '/inet6/ { print $2; exit }')
  [ -n "$a6" ] && break
  sleep 0.1; i=$((i + 1))
done
if [ -n "$a6" ]; then
  say slaac addr=$a6 via=$(ip -6 route show default |
      awk '{ print $3; exit }') up=$(up)
else
  fail slaac "$(ip -6 addr show dev eth0 | tr '\n' ' ')"
fi

if [ -n "$nst_http6" ]; then
  if timeout 20 wget -q -O /tmp/hello6.txt "http://$nst_http6/hello.txt"; then
    say fetch6 text=$(cat /tmp/hello6.txt) up=$(up)
  else
    fail fetch6
  fi
fi

# The download (host -> guest): timed on its own, hashed afterwards.
# "dlstart" lets the host read the backend's CPU time when it begins.
say dlstart up=$(up)
t0=$(up)
timeout 120 wget -q -O /www/up.bin "http://$nst_http/dl.bin"
rc=$?
t1=$(up)
say download rc=$rc bytes=$(stat -c %s /www/up.bin 2>/dev/null || echo 0) \
    start=$t0 end=$t1 sha256=$(sha256sum /www/up.bin | cut -d' ' -f1)

# The upload (guest -> host): the host fetches up.bin through its port
# forward to this server.
echo guest >/www/index.html
httpd -p 80 -h /www || fail httpd
say serving port=80 up=$(up)
sleep 600
