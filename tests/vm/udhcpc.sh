#!/bin/sh
# busybox udhcpc's script in the VM guest (tests/vm/guest_init.sh):
# configures eth0 from the lease and reports it on the console.
case "$1" in
  bound|renew)
    ip -4 addr flush dev "$interface"
    ip addr add "$ip/${mask:-24}" dev "$interface"
    [ -n "$mtu" ] && ip link set "$interface" mtu "$mtu"
    [ -n "$router" ] && ip route replace default via "${router%% *}" \
        dev "$interface"
    : >/etc/resolv.conf
    for d in $dns; do echo "nameserver $d" >>/etc/resolv.conf; done
    echo >/dev/console "NST: lease ip=$ip mask=$mask router=$router dns=$(echo $dns |
        tr ' ' ,) mtu=${mtu:-none} up=$(cut -d' ' -f1 /proc/uptime)"
    ;;
esac
exit 0
