/*
 * hpkvm: sets of host CPUs, and the two ways Linux writes them
 *
 * Copyright (c) 2026 The hpkvm developers
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include "qemu/osdep.h"
#include "qemu/cutils.h"
#include "qemu/ctype.h"
#include "qapi/error.h"
#include "hpkvm-cpuset.h"

static bool cpuset_parse_cpu(const char **p, unsigned *cpu, const char *list,
                             const char *what, Error **errp)
{
    const char *end;
    uint64_t value;

    if (!qemu_isdigit(**p) ||
        qemu_strtou64(*p, &end, 10, &value) < 0) {
        error_setg(errp, "%s: '%s' is not a CPU list: expected a CPU number "
                   "at '%s' (write lists as 2-5,8)", what, list, *p);
        return false;
    }
    if (value >= HPKVM_MAX_HOST_CPUS) {
        error_setg(errp, "%s: CPU %" PRIu64 " is beyond the %d CPUs hpkvm "
                   "handles", what, value, HPKVM_MAX_HOST_CPUS);
        return false;
    }
    *cpu = value;
    *p = end;
    return true;
}

bool hpkvm_cpuset_parse(const char *list, HpkvmCpuSet *set,
                        const char *what, Error **errp)
{
    g_autofree char *text = g_strstrip(g_strdup(list));
    const char *p = text;

    hpkvm_cpuset_clear(set);
    while (*p) {
        unsigned first, last;

        if (!cpuset_parse_cpu(&p, &first, text, what, errp)) {
            return false;
        }
        last = first;
        if (*p == '-') {
            p++;
            if (!cpuset_parse_cpu(&p, &last, text, what, errp)) {
                return false;
            }
            if (last < first) {
                error_setg(errp, "%s: '%s' has the range %u-%u backwards: "
                           "write %u-%u", what, text, first, last, last,
                           first);
                return false;
            }
        }
        bitmap_set(set->bits, first, last - first + 1);
        if (*p == ',') {
            p++;
            if (!*p) {
                error_setg(errp, "%s: '%s' ends in a comma", what, text);
                return false;
            }
        } else if (*p) {
            error_setg(errp, "%s: '%s' is not a CPU list: unexpected '%c' "
                       "(write lists as 2-5,8)", what, text, *p);
            return false;
        }
    }
    return true;
}

bool hpkvm_cpuset_parse_mask(const char *mask, HpkvmCpuSet *set,
                             const char *what, Error **errp)
{
    g_autofree char *text = g_strstrip(g_strdup(mask));
    g_auto(GStrv) words = g_strsplit(text, ",", -1);
    int nwords = g_strv_length(words);
    int i;

    hpkvm_cpuset_clear(set);
    for (i = 0; i < nwords; i++) {
        /* The last word holds CPUs 0-31. */
        unsigned base = (nwords - 1 - i) * 32;
        uint64_t value;
        const char *end;
        unsigned bit;

        if (!*words[i] || qemu_strtou64(words[i], &end, 16, &value) < 0 ||
            *end || value > UINT32_MAX) {
            error_setg(errp, "%s: '%s' is not a CPU mask", what, text);
            return false;
        }
        for (bit = 0; bit < 32 && value; bit++, value >>= 1) {
            if (!(value & 1)) {
                continue;
            }
            if (base + bit >= HPKVM_MAX_HOST_CPUS) {
                error_setg(errp, "%s: CPU %u is beyond the %d CPUs hpkvm "
                           "handles", what, base + bit, HPKVM_MAX_HOST_CPUS);
                return false;
            }
            set_bit(base + bit, set->bits);
        }
    }
    return true;
}

char *hpkvm_cpuset_format(const HpkvmCpuSet *set)
{
    GString *out = g_string_new("");
    unsigned cpu = hpkvm_cpuset_next(set, 0);

    while (cpu < HPKVM_MAX_HOST_CPUS) {
        unsigned last = find_next_zero_bit(set->bits, HPKVM_MAX_HOST_CPUS,
                                           cpu) - 1;

        g_string_append_printf(out, "%s%u", out->len ? "," : "", cpu);
        if (last > cpu) {
            g_string_append_printf(out, "-%u", last);
        }
        cpu = hpkvm_cpuset_next(set, last + 1);
    }
    return g_string_free(out, false);
}

char *hpkvm_cpuset_format_mask(const HpkvmCpuSet *set, unsigned nbits)
{
    GString *out = g_string_new("");
    int word;

    nbits = MAX(MIN(nbits, HPKVM_MAX_HOST_CPUS), 1);
    for (word = (nbits - 1) / 32; word >= 0; word--) {
        uint32_t value = 0;
        unsigned bit;

        for (bit = 0; bit < 32; bit++) {
            if (hpkvm_cpuset_has(set, word * 32 + bit)) {
                value |= 1U << bit;
            }
        }
        g_string_append_printf(out, "%s%08" PRIx32, out->len ? "," : "",
                               value);
    }
    return g_string_free(out, false);
}
