# SPDX-License-Identifier: GPL-2.0-or-later
#
# hpkvm: a thin driver around ./configure and QEMU's own ninja build.
#   make        configure (first time) and build
#   make run    build and boot the built-in guest under -accel hpkvm
#   make check  build and run hpkvm's unit tests and qtests
#   make bench  kvm / hpkvm / tcg micro-benchmarks and exit census (here,
#               and in the x86 and arm64 nested test hosts)
#   make check-vmx  what does not fit make check on the Bochs nested host
#               (VMX): Linux's KVM selftests on Debian's kvm-intel and on
#               ours, and the Bochs SVM case (about 1.5 hours)
#   make check-production-kernel  the x86 nested host's tests of our
#               whole kernel again, on it built with Debian's own config
#               (the production-config kernel; ~22 min to build, cached)
#   make install  install QEMU, its firmware and tools, hpkvm's tools and
#               the helper's systemd units (./configure --prefix=, DESTDIR=)
#   make deb    a Debian package of what "make install" installs
#               (build/deb/qemu-hpkvm_VERSION_ARCH.deb)
#   make kvm    our reference KVM (kvm/) for the nested test hosts: its
#               modules for Debian's x86 kernel, and our kernel built
#               whole, for x86 and arm64, and Linux's KVM selftests
#   make arm    the Arm side: qemu-system-aarch64 for arm64 hosts
#               (build/aarch64) and the arm64 nested test host's needs
#   make clean  remove build/

BUILD := build/qemu
QEMU := $(BUILD)/qemu-system-x86_64
GUEST := $(BUILD)/tests/hpkvm/guest/hpkvm-guest.elf

# What "make run" boots.  host,-arch-capabilities: some paravirtual
# nested KVMs (PVM) advertise IA32_ARCH_CAPABILITIES and then refuse the
# value QEMU writes; the guest does not need it.
RUN_ACCEL ?= hpkvm
RUN_CPU ?= host,-arch-capabilities
RUN_SMP ?= 2
RUN_TIMEOUT ?= 120

# What "make" builds: QEMU, the x86 option roms it needs for -kernel
# (built from source; one target makes them all) and the test guest.
RUN_TARGETS := qemu-system-x86_64 \
	pc-bios/multiboot_dma.bin \
	tests/hpkvm/guest/hpkvm-guest.elf \
	tools/hpkvm/qemu-hpkvm-recover \
	tools/hpkvm/qemu-hpkvm-helper \
	tools/hpkvm/qemu-hpkvm-check
# What "make install" installs beyond what "make" builds: the trace
# events file, QEMU's manual and the man pages (QEMU's and our tools'),
# and QEMU's own tools (qemu-img, qemu-nbd, ...: configured with ours,
# tools/hpkvm), which BUILD_INSTALLED builds.
INSTALL_TARGETS := trace/trace-events-all html man
# Build every target meson install installs, as its --no-rebuild needs
# them: read from meson's install plan when the recipe runs, after an
# earlier ninja has regenerated the build (QEMU's tools depend on what
# the host has; a plain "ninja" would also build all of QEMU's tests).
BUILD_INSTALLED = targets=$$(/usr/bin/python3 \
	scripts/hpkvm/install-targets.py $(BUILD)) && ninja -C $(BUILD) $$targets
# What "make check" builds on top: hpkvm's tests, not every test QEMU has.
CHECK_TARGETS := $(RUN_TARGETS) \
	tests/qtest/hpkvm-accel-test \
	tests/qtest/hpkvm-negotiate-test \
	tests/qtest/hpkvm-amd-iommu-vapic-test \
	tests/hpkvm/fake-kernel/libhpkvm-fake-kernel.so \
	tests/unit/test-hpkvm-accel-opts \
	tests/unit/test-hpkvm-msi \
	tests/unit/test-hpkvm-cpuset \
	tests/unit/test-hpkvm-isolate \
	tests/unit/test-hpkvm-helper-policy \
	tests/unit/test-hpkvm-hpnet-select \
	tests/unit/test-hpkvm-hpnet-probe \
	tests/hpkvm/nested-host/qmp-exec \
	tests/hpkvm/nested-host/tap-open \
	tests/hpkvm/kernel/hpkvm-contract-test \
	tests/hpkvm/kernel/hpkvm-bind-loop \
	tests/hpkvm/net/hpkvm-vhost-user-bridge \
	qemu-system-aarch64 \
	tests/hpkvm/guest-arm/hpkvm-guest-arm.elf \
	$(INSTALL_TARGETS)
# The Arm side: qemu-system-aarch64 with hpkvm, cross-built for arm64
# hosts (build/aarch64, ./configure step 4), with what the arm64 nested
# test host runs beside it.  The x86 build has TCG's aarch64 emulator
# (qemu-system-aarch64 above) that the arm64 nested host runs on.
ARM_BUILD := build/aarch64
ARM_UNIT_TESTS := accel-opts cpuset helper-policy hpnet-probe \
	hpnet-select isolate msi
ARM_TARGETS := qemu-system-aarch64 \
	tools/hpkvm/qemu-hpkvm-helper \
	tools/hpkvm/qemu-hpkvm-check \
	tests/hpkvm/nested-host/qmp-exec \
	tests/hpkvm/net/hpkvm-vhost-user-bridge \
	tests/hpkvm/kernel/hpkvm-contract-test \
	$(addprefix tests/unit/test-hpkvm-,$(ARM_UNIT_TESTS))

# How long each of "make check"'s build steps took, in seconds, a
# "STEP SECONDS" line each: run-tests.py prints them with the tests'
# durations at the end of the log (CI keeps only its end) and removes
# the file.  timed runs its command (echoed, as make would) and appends
# the step's line when the command succeeded.
CHECK_TIMES := build/check-times
timed = @echo '$(2)' && mkdir -p build && start=$$(date +%s) && $(2) && \
	echo "$(1) $$(( $$(date +%s) - start ))" >> $(CHECK_TIMES)

.PHONY: all build configure run check check-vmx check-production-kernel \
	bench install deb kvm arm clean

all: build

$(BUILD)/build.ninja:
	$(call timed,configure,./configure)

# Re-lay the overlay each time: new files of ours and changed patches
# are picked up; QEMU's configure only runs again when its arguments
# change.
configure:
	@./configure --no-install-deps >/dev/null

build: $(BUILD)/build.ninja configure
	ninja -C $(BUILD) $(RUN_TARGETS)

run: build
	@/usr/bin/python3 scripts/hpkvm/run-guest.py $(QEMU) $(GUEST) $(RUN_TIMEOUT) \
		-accel $(RUN_ACCEL) -cpu $(RUN_CPU) -smp $(RUN_SMP)

check: $(BUILD)/build.ninja configure
	$(call timed,qemu,ninja -C $(BUILD) $(CHECK_TARGETS))
	$(call timed,aarch64,ninja -C $(ARM_BUILD) $(ARM_TARGETS))
	$(call timed,installed,$(BUILD_INSTALLED))
	$(call timed,kernel-x86,kvm/build-kernel.sh)
	$(call timed,kernel-arm64,kvm/build-kernel.sh --arch arm64)
	$(call timed,selftests-x86,kvm/build-selftests.sh)
	$(call timed,selftests-arm64,kvm/build-selftests.sh --arch arm64)
	@/usr/bin/python3 scripts/hpkvm/run-tests.py $(BUILD) \
		--build-times $(CHECK_TIMES)

# Bochs boots take minutes each (docs/devel/testing/hpkvm-nested-host.rst):
# make check has one VMX case, these are the others.
check-vmx: $(BUILD)/build.ninja configure
	ninja -C $(BUILD) $(RUN_TARGETS) tests/hpkvm/nested-host/qmp-exec \
		tests/hpkvm/nested-host/tap-open \
		tests/hpkvm/kernel/hpkvm-contract-test
	kvm/build-selftests.sh
	HPKVM_BUILD=$(abspath $(BUILD)) /usr/bin/python3 \
		tests/hpkvm/nested-host/test_bochs_host.py --all
	HPKVM_BUILD=$(abspath $(BUILD)) /usr/bin/python3 \
		tests/hpkvm/nested-host/test_kvm_selftests.py vmx

# Our whole kernel is built over tinyconfig for make check (9 min, where
# Debian's config takes 22): this runs the tests that boot it again on
# it built with Debian's config, where a grant must hold as it does on
# the kernel users run.
check-production-kernel: $(BUILD)/build.ninja configure
	ninja -C $(BUILD) $(CHECK_TARGETS)
	kvm/build-kernel.sh --config debian
	HPKVM_BUILD=$(abspath $(BUILD)) /usr/bin/python3 \
		tests/hpkvm/nested-host/test_nested_host.py --kernel-config debian

# The micro-benchmarks: kvm, hpkvm and tcg side by side, here and in the
# nested test hosts (x86 and arm64); a table per host,
# build/bench/results.json and ratios.png.
bench: build
	ninja -C $(BUILD) tests/hpkvm/nested-host/qmp-exec \
		tests/hpkvm/nested-host/tap-open qemu-system-aarch64 \
		tests/hpkvm/guest-arm/hpkvm-guest-arm.elf
	ninja -C $(ARM_BUILD) $(ARM_TARGETS)
	@scripts/hpkvm/install-deps.sh --bench
	@/usr/bin/python3 scripts/hpkvm/bench.py $(BUILD) $(BENCH_ARGS)

# QEMU's own install of what "make" builds, INSTALL_TARGETS and QEMU's
# tools (meson install: relocatable, so a DESTDIR tree runs where it lies).
install: build
	ninja -C $(BUILD) $(INSTALL_TARGETS)
	$(BUILD_INSTALLED)
	$(BUILD)/pyvenv/bin/meson install -C $(BUILD) --no-rebuild --quiet $(if $(DESTDIR),--destdir "$(abspath $(DESTDIR))")

deb: build
	ninja -C $(BUILD) $(INSTALL_TARGETS)
	$(BUILD_INSTALLED)
	@scripts/hpkvm/build-deb.sh $(BUILD) build/deb

# Only the Arm side (e.g. to try it in the arm64 nested test host:
# tests/hpkvm/nested-host/nested_host.py run --arch aarch64 ...).
arm: $(BUILD)/build.ninja configure
	ninja -C $(BUILD) qemu-system-aarch64 \
		tests/hpkvm/guest-arm/hpkvm-guest-arm.elf
	ninja -C $(ARM_BUILD) $(ARM_TARGETS)

# The nested test host builds it itself when it boots; this is for
# working on the series.
kvm:
	kvm/build.sh
	kvm/build-kernel.sh
	kvm/build-kernel.sh --arch arm64
	kvm/build-selftests.sh
	kvm/build-selftests.sh --arch arm64

clean:
	rm -rf build
