#!/bin/sh
# Runs CMD as root of the Debian tree ROOT, as on a machine booted from it:
#
#   unshare --mount --propagation private --pid --fork in_root.sh ROOT CMD...
#
# In the caller's new mount and PID namespaces: a fresh /proc and /sys,
# a devpts, a /dev/net/tun of mode 0666 (as Debian's udev makes it; the
# host's stays as it is), and the apt archive cache given in
# NST_APT_ARCHIVES bound over ROOT's. Then pivot_root, not chroot: the
# kernel refuses a new user namespace to a chrooted process, and
# netstackd -- CMD makes one. Everything mounted here goes away with the
# mount namespace, when CMD's PID namespace ends.
set -eu
root="$1"
shift
mount --bind "$root" "$root"
mount -t proc -o nosuid,nodev,noexec proc "$root/proc"
mount -t sysfs -o ro,nosuid,nodev,noexec sysfs "$root/sys"
mount -t devpts -o newinstance,ptmxmode=0666,mode=0620 devpts "$root/dev/pts"
mount -t tmpfs -o mode=1777,nosuid,nodev tmpfs "$root/dev/shm"
mkdir -p "$root/dev/net"
[ -c "$root/dev/net/tun" ] || mknod -m 0666 "$root/dev/net/tun" c 10 200
if [ -n "${NST_APT_ARCHIVES:-}" ]; then
  mount --bind "$NST_APT_ARCHIVES" "$root/var/cache/apt/archives"
fi
cd "$root"
mkdir -p .oldroot
pivot_root . .oldroot
cd /
umount -l /.oldroot
rmdir /.oldroot
exec env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
  HOME=/root LANG=C.UTF-8 DEBIAN_FRONTEND=noninteractive "$@"
