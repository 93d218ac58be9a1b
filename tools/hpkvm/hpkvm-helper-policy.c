/*
 * qemu-hpkvm-helper: which users may lease which host cores
 *
 * Copyright (c) 2026 The hpkvm developers
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include "qemu/osdep.h"
#include <grp.h>
#include <pwd.h>
#include "qemu/cutils.h"
#include "qapi/error.h"
#include "hpkvm-helper-policy.h"

typedef struct PolicyRule {
    bool group;                 /* @id is a gid, else a uid */
    unsigned id;
    HpkvmCpuSet cores;
} PolicyRule;

struct HpkvmHelperPolicy {
    char *shown;                /* where the rules came from */
    GArray *rules;              /* of PolicyRule */
};

/* A user or group named by name or number; false if there is none. */
static bool policy_parse_id(const char *word, bool group, unsigned *id)
{
    struct passwd *pw;
    struct group *gr;

    if (qemu_strtoui(word, NULL, 10, id) == 0) {
        return true;
    }
    if (group) {
        gr = getgrnam(word);
        *id = gr ? gr->gr_gid : 0;
        return gr;
    }
    pw = getpwnam(word);
    *id = pw ? pw->pw_uid : 0;
    return pw;
}

HpkvmHelperPolicy *hpkvm_helper_policy_parse(const char *text,
                                             const char *shown,
                                             Error **errp)
{
    ERRP_GUARD();
    g_autoptr(HpkvmHelperPolicy) p = g_new0(HpkvmHelperPolicy, 1);
    g_auto(GStrv) lines = g_strsplit(text, "\n", -1);
    int i;

    p->shown = g_strdup(shown);
    p->rules = g_array_new(false, true, sizeof(PolicyRule));
    for (i = 0; lines[i]; i++) {
        char *hash = strchr(lines[i], '#');
        g_auto(GStrv) split = NULL;
        g_autoptr(GPtrArray) w = g_ptr_array_new();
        g_autofree char *what = g_strdup_printf("%s, line %d", shown, i + 1);
        PolicyRule rule = { 0 };
        char **words;
        int j;

        if (hash) {
            *hash = '\0';
        }
        split = g_strsplit_set(g_strstrip(lines[i]), " \t", -1);
        for (j = 0; split[j]; j++) {
            if (*split[j]) {
                g_ptr_array_add(w, split[j]);
            }
        }
        if (!w->len) {
            continue;
        }
        g_ptr_array_add(w, NULL);
        words = (char **)w->pdata;
        if (w->len != 5 || strcmp(words[0], "allow") ||
            (strcmp(words[2], "user") && strcmp(words[2], "group"))) {
            error_setg(errp, "%s: not a rule: '%s'", what, lines[i]);
            error_append_hint(errp, "Rules are 'allow CPULIST user "
                              "NAME|UID' and 'allow CPULIST group "
                              "NAME|GID', one per line.\n");
            return NULL;
        }
        if (!hpkvm_cpuset_parse(words[1], &rule.cores, what, errp)) {
            return NULL;
        }
        rule.group = !strcmp(words[2], "group");
        if (!policy_parse_id(words[3], rule.group, &rule.id)) {
            error_setg(errp, "%s: no %s named '%s' on this host", what,
                       words[2], words[3]);
            error_append_hint(errp, "Name an existing %s, or give its "
                              "number.\n", words[2]);
            return NULL;
        }
        g_array_append_val(p->rules, rule);
    }
    return g_steal_pointer(&p);
}

HpkvmHelperPolicy *hpkvm_helper_policy_load(const char *path, Error **errp)
{
    ERRP_GUARD();
    g_autofree char *text = NULL;
    struct stat st;
    gsize len;
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);

    if (fd < 0 && errno == ENOENT) {
        return hpkvm_helper_policy_parse("", path, errp);
    }
    if (fd < 0) {
        error_setg_errno(errp, errno, "cannot open the policy %s", path);
        if (errno == ELOOP) {
            error_append_hint(errp, "The policy is never read through a "
                              "symbolic link: make it a file.\n");
        }
        return NULL;
    }
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) ||
        (st.st_uid != 0 && st.st_uid != geteuid()) ||
        (st.st_mode & 022)) {
        error_setg(errp, "the policy %s is not a regular file of root's "
                   "that only root may change", path);
        error_append_hint(errp, "chown root %s; chmod 0644 %s\n", path,
                          path);
        close(fd);
        return NULL;
    }
    close(fd);
    /* Read by name after the checks: the file is root's, it stays put. */
    if (!g_file_get_contents(path, &text, &len, NULL) ||
        strlen(text) != len) {
        error_setg(errp, "cannot read the policy %s", path);
        return NULL;
    }
    return hpkvm_helper_policy_parse(text, path, errp);
}

static bool policy_in_groups(const HpkvmPeer *peer, gid_t gid)
{
    guint i;

    if (peer->gid == gid) {
        return true;
    }
    for (i = 0; peer->groups && i < peer->groups->len; i++) {
        if (g_array_index(peer->groups, gid_t, i) == gid) {
            return true;
        }
    }
    return false;
}

bool hpkvm_helper_policy_allows(const HpkvmHelperPolicy *p,
                                const HpkvmPeer *peer,
                                const HpkvmCpuSet *cores, Error **errp)
{
    HpkvmCpuSet allowed, refused;
    g_autofree char *list = NULL;
    guint i;

    if (peer->uid == 0) {
        return true;
    }
    hpkvm_cpuset_clear(&allowed);
    for (i = 0; i < p->rules->len; i++) {
        PolicyRule *r = &g_array_index(p->rules, PolicyRule, i);

        if (r->group ? policy_in_groups(peer, r->id) : r->id == peer->uid) {
            hpkvm_cpuset_or(&allowed, &allowed, &r->cores);
        }
    }
    hpkvm_cpuset_andnot(&refused, cores, &allowed);
    if (hpkvm_cpuset_empty(&refused)) {
        return true;
    }
    list = hpkvm_cpuset_format(&refused);
    /* The fix goes in the message: hints do not cross the socket. */
    error_setg(errp, "the host's policy does not let uid %u lease host "
               "core%s %s: choose cores it allows, or ask the host's "
               "administrator for an 'allow %s user %u' line in %s",
               (unsigned)peer->uid,
               hpkvm_cpuset_count(&refused) == 1 ? "" : "s", list, list,
               (unsigned)peer->uid, p->shown);
    return false;
}

void hpkvm_helper_policy_free(HpkvmHelperPolicy *p)
{
    if (p) {
        if (p->rules) {
            g_array_free(p->rules, true);
        }
        g_free(p->shown);
        g_free(p);
    }
}
