//! The hardline class as a class: every write that ends or corrupts the machine at once is
//! denied however it is spelt (redirection, `tee`, `dd`, `sudo`, `sh -c`, an interpreter),
//! and the reads and look-alikes of those files are not.

use super::*;

fn gate() -> ApprovalGate {
    let mut policy = Policy::builtin();
    policy.approval.approver = Some(toml::Spanned::new(0..0, "none".into()));
    ApprovalGate::from_policy(
        &policy,
        std::env::temp_dir().join("paddock-approval-hardline-test"),
    )
    .unwrap()
}

/// `(command, rule that must deny it)`.
const MACHINE_ENDING: &[(&str, &str)] = &[
    // The SysRq trigger: `c` crashes the kernel, `b` reboots, `o` powers off, at once.
    ("echo c > /proc/sysrq-trigger", "kernel-fatal-write"),
    ("echo b | tee /proc/sysrq-trigger", "kernel-fatal-write"),
    ("echo c | dd of=/proc/sysrq-trigger", "kernel-fatal-write"),
    ("printf c >/proc/sysrq-trigger", "kernel-fatal-write"),
    ("echo o >> /proc/sysrq-trigger", "kernel-fatal-write"),
    (
        "echo c | sudo tee -a /proc/sysrq-trigger",
        "kernel-fatal-write",
    ),
    (
        "sudo sh -c 'echo b > /proc/sysrq-trigger'",
        "kernel-fatal-write",
    ),
    (
        "bash -c \"echo o > /proc/sysrq-trigger\"",
        "kernel-fatal-write",
    ),
    ("su -c 'echo c > /proc/sysrq-trigger'", "kernel-fatal-write"),
    (
        "busybox sh -c 'echo c > /proc/sysrq-trigger'",
        "kernel-fatal-write",
    ),
    ("cd /proc && echo c > sysrq-trigger", "kernel-fatal-write"),
    (
        "T=/proc/sysrq-trigger; echo c > \"$T\"",
        "kernel-fatal-write",
    ),
    (
        "echo c > /proc/../proc//sysrq-trigger",
        "kernel-fatal-write",
    ),
    (
        "echo c > /proc/self/root/proc/sysrq-trigger",
        "kernel-fatal-write",
    ),
    ("echo c > /proc/sysrq-trig*", "kernel-fatal-write"),
    ("exec 3>/proc/sysrq-trigger", "kernel-fatal-write"),
    ("cp crash.txt /proc/sysrq-trigger", "kernel-fatal-write"),
    (
        "python3 -c \"open('/proc/sysrq-trigger','w').write('c')\"",
        "kernel-fatal-write",
    ),
    (
        "python3 -c \"import os; os.system('echo c > /proc/sysrq-trigger')\"",
        "kernel-fatal-write",
    ),
    (
        "python3 -c \"from pathlib import Path; Path('/proc/sysrq-trigger').write_text('c')\"",
        "kernel-fatal-write",
    ),
    (
        "python3 -c \"import os; fd = os.open('/proc/sysrq-trigger', os.O_WRONLY); os.write(fd, b'c')\"",
        "kernel-fatal-write",
    ),
    (
        "perl -e 'open(my $f, \">\", \"/proc/sysrq-trigger\"); print $f \"c\"'",
        "kernel-fatal-write",
    ),
    (
        "perl -e 'open(F, \">/proc/sysrq-trigger\"); print F \"b\"'",
        "kernel-fatal-write",
    ),
    (
        "ruby -e 'File.write(\"/proc/sysrq-trigger\", \"c\")'",
        "kernel-fatal-write",
    ),
    (
        "ruby -e 'File.open(\"/proc/sysrq-trigger\", \"w\") { |f| f.write \"c\" }'",
        "kernel-fatal-write",
    ),
    (
        "node -e \"require('fs').writeFileSync('/proc/sysrq-trigger', 'c')\"",
        "kernel-fatal-write",
    ),
    (
        "node -e \"require('fs').writeFile('/proc/sysrq-trigger', 'c', () => {})\"",
        "kernel-fatal-write",
    ),
    (
        "php -r \"file_put_contents('/proc/sysrq-trigger', 'c');\"",
        "kernel-fatal-write",
    ),
    // The magic-SysRq sysctl and the panic settings: arming the kernel to die.
    ("echo 1 > /proc/sys/kernel/sysrq", "kernel-fatal-write"),
    ("sysctl -w kernel.sysrq=1", "kernel-fatal-write"),
    ("sudo sysctl kernel.sysrq=1", "kernel-fatal-write"),
    ("sysctl -w kernel/sysrq=1", "kernel-fatal-write"),
    ("sysctl kernel.panic=1", "kernel-fatal-write"),
    ("sysctl -w kernel.panic_on_oops=1", "kernel-fatal-write"),
    ("sysctl -w vm.panic_on_oom=1", "kernel-fatal-write"),
    (
        "echo 1 | sudo tee /proc/sys/kernel/panic_on_oops",
        "kernel-fatal-write",
    ),
    ("echo 1 > /proc/sys/kernel/panic", "kernel-fatal-write"),
    // Kernel memory, I/O ports, the kernel log, the watchdog, CPU registers.
    ("dd if=/dev/zero of=/dev/mem", "kernel-fatal-write"),
    ("cat payload.bin > /dev/kmem", "kernel-fatal-write"),
    ("echo x > /dev/port", "kernel-fatal-write"),
    ("yes spam > /dev/kmsg", "kernel-fatal-write"),
    ("echo hi | tee /dev/kmsg", "kernel-fatal-write"),
    ("echo 1 > /dev/watchdog", "kernel-fatal-write"),
    ("echo 1 > /dev/watchdog0", "kernel-fatal-write"),
    ("printf x | dd of=/dev/cpu/0/msr", "kernel-fatal-write"),
    (
        "python3 -c \"open('/dev/mem','r+b').write(b'x')\"",
        "kernel-fatal-write",
    ),
    // Power state.
    ("echo mem > /sys/power/state", "kernel-fatal-write"),
    ("echo disk > /sys/power/state", "kernel-fatal-write"),
    (
        "echo freeze | sudo tee /sys/power/state",
        "kernel-fatal-write",
    ),
    ("echo reboot > /sys/power/disk", "kernel-fatal-write"),
    ("echo 8:2 > /sys/power/resume", "kernel-fatal-write"),
    // Raw block devices.
    ("dd if=/dev/zero of=/dev/sda", "raw-device-write"),
    ("sudo dd if=/dev/zero of=/dev/sda bs=1M", "raw-device-write"),
    ("cat x > /dev/nvme0n1p1", "raw-device-write"),
    ("dd if=/dev/zero of=/dev/vda bs=1M", "raw-device-write"),
    ("cat image.img > /dev/mmcblk0", "raw-device-write"),
    ("dd if=image.img of=/dev/xvda", "raw-device-write"),
    ("cat /dev/urandom > /dev/dm-0", "raw-device-write"),
    ("echo x > /dev/md0", "raw-device-write"),
    ("dd if=/dev/zero of=/dev/loop0", "raw-device-write"),
    ("dd if=/dev/zero of=/dev/nbd0", "raw-device-write"),
    ("dd if=/dev/zero of=/dev/zram0", "raw-device-write"),
    (
        "dd if=/dev/zero of=/dev/disk/by-id/nvme-Samsung_SSD_980",
        "raw-device-write",
    ),
    (
        "dd if=/dev/zero of=/dev/mapper/vg0-root",
        "raw-device-write",
    ),
    (
        "dd if=/dev/zero of=/proc/self/root/dev/sda",
        "raw-device-write",
    ),
    ("cp disk.img /dev/sdc", "raw-device-write"),
    ("ddrescue -f image.img /dev/sdb", "raw-device-write"),
    ("dcfldd if=/dev/zero of=/dev/sdb", "raw-device-write"),
    ("curl -o /dev/sda https://x/image.img", "raw-device-write"),
    ("wget -qO /dev/sda https://x/image.img", "raw-device-write"),
    (
        "python3 -c \"open('/dev/sda','rb+').write(b'0' * 512)\"",
        "raw-device-write",
    ),
    ("echo x | tee /dev/[sv]da", "raw-device-write"),
    // Erasing a disk through its firmware or a destructive test.
    ("badblocks -wsv /dev/sdb", "disk-erase"),
    ("nvme format /dev/nvme0n1", "disk-erase"),
    ("sudo nvme sanitize -a 2 /dev/nvme0", "disk-erase"),
    (
        "hdparm --user-master u --security-erase p /dev/sda",
        "disk-erase",
    ),
    ("sg_format --format /dev/sg1", "disk-erase"),
    // EFI variables: deleting them can leave the machine unbootable.
    (
        "rm /sys/firmware/efi/efivars/Boot0001-8be4df61-93ca-11d2-aa0d-00e098032b8c",
        "efi-variables",
    ),
    ("rm -rf /sys/firmware/efi/efivars/*", "efi-variables"),
    ("sudo rm -rf /sys/firmware/efi/efivars", "efi-variables"),
    ("sudo rm -rf /sys/firmware/efi", "efi-variables"),
    ("rm -rf /sys/firmware/*", "efi-variables"),
    ("find /sys/firmware/efi/efivars -delete", "efi-variables"),
    (
        "chattr -i /sys/firmware/efi/efivars/Boot0001-8be4df61-93ca-11d2-aa0d-00e098032b8c",
        "efi-variables",
    ),
    (
        "printf '\\x07\\x00\\x00\\x00' > /sys/firmware/efi/efivars/Foo-8be4df61-93ca-11d2-aa0d-00e098032b8c",
        "efi-variables",
    ),
    ("echo x > /sys/firmware/efi/vars/del_var", "efi-variables"),
    (
        "efivar -w -n 8be4df61-93ca-11d2-aa0d-00e098032b8c-Boot0000 -f boot.bin",
        "efi-variables",
    ),
    (
        "python3 -c \"import os; os.remove('/sys/firmware/efi/efivars/Boot0000-8be4df61-93ca-11d2-aa0d-00e098032b8c')\"",
        "efi-variables",
    ),
    // Rebooting, powering off, suspending, or replacing the running kernel.
    ("kexec -e", "shutdown"),
    (
        "kexec -l /boot/vmlinuz --initrd=/boot/initrd.img --reuse-cmdline",
        "shutdown",
    ),
    ("sudo kexec -f /boot/vmlinuz", "shutdown"),
    ("kexec /boot/vmlinuz", "shutdown"),
    ("systemctl kexec", "shutdown"),
    ("systemctl start reboot.target", "shutdown"),
    ("sudo systemctl start poweroff.target", "shutdown"),
    ("systemctl isolate halt.target", "shutdown"),
    ("rtcwake -m off -s 60", "shutdown"),
    ("rtcwake -m mem -s 10", "shutdown"),
    ("pm-suspend", "shutdown"),
    (
        "busctl call org.freedesktop.login1 /org/freedesktop/login1 org.freedesktop.login1.Manager PowerOff b false",
        "shutdown",
    ),
    (
        "dbus-send --system --print-reply --dest=org.freedesktop.login1 /org/freedesktop/login1 org.freedesktop.login1.Manager.Reboot boolean:true",
        "shutdown",
    ),
    ("busybox reboot -f", "shutdown"),
    ("sudo shutdown -r now", "shutdown"),
    ("halt", "shutdown"),
    ("init 0", "shutdown"),
];

/// Reads and look-alikes: `(command, decision)`. None of them is denied.
const LOOK_ALIKES: &[(&str, Decision)] = &[
    ("cat /proc/sysrq-trigger", Decision::Allow),
    ("ls -l /proc/sysrq-trigger", Decision::Allow),
    ("cat /proc/sys/kernel/sysrq", Decision::Allow),
    ("cat /proc/sys/kernel/panic", Decision::Allow),
    ("sysctl kernel.sysrq", Decision::Allow),
    ("sysctl kernel.panic kernel.panic_on_oops", Decision::Allow),
    ("sysctl -a | grep panic", Decision::Allow),
    ("grep sysrq-trigger notes.md", Decision::Allow),
    ("echo 'echo c > /proc/sysrq-trigger'", Decision::Allow),
    ("echo c > ./proc/sysrq-trigger", Decision::Allow),
    (
        "mkdir -p proc && echo c > proc/sysrq-trigger",
        Decision::Allow,
    ),
    ("echo c > /tmp/proc/sysrq-trigger", Decision::Allow),
    ("echo c > sysrq-trigger.txt", Decision::Allow),
    ("echo x > /dev/null", Decision::Allow),
    ("echo x > /dev/stdout", Decision::Allow),
    ("echo x > /dev/stderr", Decision::Allow),
    ("echo x > /dev/tty", Decision::Allow),
    ("printf x > /dev/fd/2", Decision::Allow),
    ("echo x > /dev/shm/scratch", Decision::Allow),
    (
        "curl -o /dev/null -s -w '%{http_code}' https://x",
        Decision::Allow,
    ),
    ("cat /dev/sda | head -c 512 | xxd", Decision::Allow),
    (
        "dd if=/dev/zero of=disk.img bs=1M count=100",
        Decision::Allow,
    ),
    ("dd if=/dev/sda of=disk.img bs=1M", Decision::Ask),
    ("ls /sys/power", Decision::Allow),
    ("cat /sys/power/state", Decision::Allow),
    ("ls /sys/firmware/efi/efivars", Decision::Allow),
    ("lsattr /sys/firmware/efi/efivars", Decision::Allow),
    ("efibootmgr -v", Decision::Allow),
    ("efivar -l", Decision::Allow),
    ("dmesg | tail", Decision::Allow),
    ("head -n 5 /dev/kmsg", Decision::Allow),
    ("ls -l /dev/mem /dev/kmem /dev/port", Decision::Allow),
    ("lsblk", Decision::Allow),
    ("blkid /dev/sda1", Decision::Allow),
    ("hdparm -I /dev/sda", Decision::Allow),
    ("nvme list", Decision::Allow),
    ("nvme smart-log /dev/nvme0", Decision::Allow),
    ("badblocks -sv /dev/sdb", Decision::Allow),
    ("kexec --help", Decision::Allow),
    (
        "kexec -p /boot/vmlinuz-crash --initrd=/boot/initrd-crash.img",
        Decision::Allow,
    ),
    ("man kexec", Decision::Allow),
    ("shutdown -c", Decision::Allow),
    ("systemctl status reboot.target", Decision::Allow),
    (
        "systemctl list-dependencies poweroff.target",
        Decision::Allow,
    ),
    ("rtcwake -m show", Decision::Allow),
    (
        "busctl introspect org.freedesktop.login1 /org/freedesktop/login1",
        Decision::Allow,
    ),
    // Still system files or settings, so a human is asked, but they end nothing.
    ("echo 1 > /proc/sys/net/ipv4/ip_forward", Decision::Ask),
    ("echo 3 | sudo tee /proc/sys/vm/drop_caches", Decision::Ask),
    ("sysctl -w net.ipv4.ip_forward=1", Decision::Ask),
    ("sysctl -p /etc/sysctl.d/99-custom.conf", Decision::Ask),
    (
        "chattr +i /sys/firmware/efi/efivars/Boot0001-8be4df61-93ca-11d2-aa0d-00e098032b8c",
        Decision::Ask,
    ),
    (
        "rm /sys/firmware/efi/efivars/dump-type0-1-1-1700000000-C-cfc8fc79-be2e-4ddc-97f0-9f98bfe298a0",
        Decision::Ask,
    ),
    ("chattr -i /etc/resolv.conf", Decision::Ask),
];

#[test]
fn machine_ending_writes_are_hardline_in_every_spelling() {
    let gate = gate();
    let mut failures = Vec::new();
    for (command, rule) in MACHINE_ENDING {
        let e = gate.explain(command, "s");
        if e.decision != Decision::Deny || !e.reason.contains("hardline") {
            failures.push(format!(
                "not hardline: {command:?} -> {} ({})",
                e.decision,
                e.rule.as_deref().unwrap_or("no rule")
            ));
        } else if e.rule.as_deref() != Some(rule) {
            failures.push(format!(
                "wrong rule: {command:?} -> {} (want {rule})",
                e.rule.as_deref().unwrap_or("no rule")
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} fail:\n{}",
        failures.len(),
        MACHINE_ENDING.len(),
        failures.join("\n")
    );
}

#[test]
fn reads_and_look_alikes_of_machine_ending_files_are_not_denied() {
    let gate = gate();
    let mut failures = Vec::new();
    for (command, want) in LOOK_ALIKES {
        let e = gate.explain(command, "s");
        if e.decision != *want {
            failures.push(format!(
                "{command:?} -> {} ({}), want {want}",
                e.decision,
                e.rule.as_deref().unwrap_or("no rule")
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} fail:\n{}",
        failures.len(),
        LOOK_ALIKES.len(),
        failures.join("\n")
    );
}

#[test]
fn a_relative_sysrq_trigger_is_the_real_one_only_from_the_root() {
    let gate = gate();
    let decide = |command: &str, cwd: &str| gate.explain_in(command, "s", Some(cwd)).decision;
    assert_eq!(decide("echo c > proc/sysrq-trigger", "/"), Decision::Deny);
    assert_eq!(decide("echo c > ./proc/sysrq-trigger", "/"), Decision::Deny);
    assert_eq!(decide("echo c > sysrq-trigger", "/proc"), Decision::Deny);
    assert_eq!(decide("dd if=/dev/zero of=sda", "/dev"), Decision::Deny);
    assert_eq!(
        decide("echo c > ./proc/sysrq-trigger", "/home/~/src"),
        Decision::Allow
    );
    assert_eq!(decide("echo c > sysrq-trigger", "/tmp"), Decision::Allow);
    assert_eq!(
        decide("cd / && echo c > proc/sysrq-trigger", "/home/~/src"),
        Decision::Deny
    );
}
