# SPDX-License-Identifier: GPL-2.0-or-later
"""The libvirt domain hpkvm's tests start: our guest as its kernel, one
vCPU pinned by <vcpupin>, the emulator by <emulatorpin>, ACPI (without
it i440fx's PCI bus takes no device_add), and -accel from
<qemu:commandline>; shared by the test on this host's libvirt
(test_libvirt.py) and the one in the nested test host."""


def domain_xml(name, *, emulator, kernel, serial, vcpupin, emulatorpin,
               accel, cmdline="hold"):
    return f"""<domain type='kvm'
        xmlns:qemu='http://libvirt.org/schemas/domain/qemu/1.0'>
  <name>{name}</name>
  <memory unit='MiB'>64</memory>
  <vcpu placement='static'>1</vcpu>
  <cputune>
    <vcpupin vcpu='0' cpuset='{vcpupin}'/>
    <emulatorpin cpuset='{emulatorpin}'/>
  </cputune>
  <os>
    <type arch='x86_64' machine='pc'>hvm</type>
    <kernel>{kernel}</kernel>
    <cmdline>{cmdline}</cmdline>
  </os>
  <features>
    <acpi/>
  </features>
  <cpu mode='host-passthrough'>
    <feature policy='disable' name='arch-capabilities'/>
  </cpu>
  <devices>
    <emulator>{emulator}</emulator>
    <serial type='file'><source path='{serial}'/></serial>
  </devices>
  <qemu:commandline>
    <qemu:arg value='-accel'/>
    <qemu:arg value='{accel}'/>
  </qemu:commandline>
</domain>
"""
