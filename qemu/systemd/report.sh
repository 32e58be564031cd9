#!/bin/sh
# The systemd guest's report (qemu/systemd_test.go parses the lines that
# start with "unwound-systemd:"). Run by unwound-lab-report.service once
# the crash unit is done; powers the guest off.
say() { echo "unwound-systemd: $*"; }
show() { systemctl show -P "$2" "$1" 2>/dev/null; }

say "uptime=$(cut -d' ' -f1 /proc/uptime)"
say "kernel=$(uname -r)"
say "systemd=$(systemctl --version | head -n 1)"
say "core_pattern=$(cat /proc/sys/kernel/core_pattern)"
for u in systemd-sysctl.service systemd-coredumpd.service systemd-coredump-register.service \
	unwound-coredump.socket unwound-coredump.service systemd-coredump.socket unwound-lab-crash.service; do
	say "unit $u load=$(show $u LoadState) active=$(show $u ActiveState) result=$(show $u Result)" \
		"exit=$(show $u ExecMainStatus) start_us=$(show $u InactiveExitTimestampMonotonic)" \
		"active_us=$(show $u ActiveEnterTimestampMonotonic) main_exit_us=$(show $u ExecMainExitTimestampMonotonic)"
done
say "socket_after=$(show unwound-coredump.socket After | tr ' ' ',')"
# The server writes the report after the kernel releases the task: wait
# for it a little.
q=/var/lib/unwound/queue
i=0
while [ "$i" -lt 30 ] && [ -z "$(ls -A "$q" 2>/dev/null)" ]; do
	sleep 1
	i=$((i + 1))
done
n=0
for f in "$q"/*; do
	[ -f "$f" ] || continue
	say "queue $(basename "$f") $(wc -c <"$f")"
	case $f in *.json.zst) n=$((n + 1)) ;; esac
done
say "queue_count=$n"
ls -la "$q"
say "systemd_coredump_files=$(find /var/lib/systemd/coredump -type f 2>/dev/null | wc -l)"
say "journal_dumped_core=$(journalctl -b -q --no-pager -g 'dumped core' 2>/dev/null | wc -l)"
pid=$(show unwound-coredump.service MainPID)
[ -n "$pid" ] && [ "$pid" != 0 ] && say "server_rss_kb=$(sed -n 's/^VmRSS:[[:space:]]*\([0-9]*\).*/\1/p' /proc/"$pid"/status)"
echo "--- journal: sysctl, coredump register, unwound"
journalctl -b -q --no-pager -o short-monotonic -u systemd-sysctl.service -u systemd-coredumpd.service \
	-u systemd-coredump-register.service -u unwound-coredump.socket -u unwound-coredump.service \
	-u unwound-lab-crash.service 2>&1 | tail -n 40
echo "--- kernel log: unwound"
dmesg 2>/dev/null | grep -i -e unwound -e coredump | tail -n 20
echo "--- end"
echo "UNWOUND-GUEST-DONE rc=0"
systemctl --no-block poweroff
