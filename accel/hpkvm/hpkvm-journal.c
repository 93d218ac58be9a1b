/*
 * hpkvm: the journal of host changes, and their undoing
 *
 * One line per change: the kind, the key and the old value (escaped),
 * separated by tabs.  A torn last line (a crash while appending) is
 * ignored: its change was not made yet.
 *
 * Copyright (c) 2026 The hpkvm developers
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include "qemu/osdep.h"
#include "qemu/cutils.h"
#include "qapi/error.h"
#include "hpkvm-journal.h"
#include "trace.h"

typedef struct JournalEntry {
    HpkvmUndo kind;
    char *key;
    char *old;
} JournalEntry;

struct HpkvmJournal {
    const HpkvmHost *host;
    char *path;                 /* on the host, under the root */
    int fd;
    GPtrArray *entries;         /* oldest first */
    GHashTable *originals;      /* "K key" -> old */
};

static void entry_free(gpointer p)
{
    JournalEntry *e = p;

    g_free(e->key);
    g_free(e->old);
    g_free(e);
}

static char *index_key(HpkvmUndo kind, const char *key)
{
    return g_strdup_printf("%c %s", kind, key);
}

static void add_entry(HpkvmJournal *j, HpkvmUndo kind, const char *key,
                      const char *old)
{
    JournalEntry *e = g_new0(JournalEntry, 1);

    e->kind = kind;
    e->key = g_strdup(key);
    e->old = g_strdup(old);
    g_ptr_array_add(j->entries, e);
    g_hash_table_insert(j->originals, index_key(kind, key), e->old);
}

static void load(HpkvmJournal *j, const char *text)
{
    g_auto(GStrv) lines = g_strsplit(text, "\n", -1);
    int i;

    /* The last piece is what follows the last newline: incomplete. */
    for (i = 0; lines[i] && lines[i + 1]; i++) {
        g_auto(GStrv) f = g_strsplit(lines[i], "\t", 3);
        g_autofree char *old = NULL;

        if (g_strv_length(f) != 3 || strlen(f[0]) != 1 ||
            !strchr("WDPAC", f[0][0])) {
            continue;
        }
        old = g_strcompress(f[2]);
        add_entry(j, f[0][0], f[1], old);
    }
}

/* Open (again, after a replay removed it) the file to append to. */
static bool journal_file(HpkvmJournal *j, Error **errp)
{
    g_autofree char *full = NULL;

    if (j->fd >= 0) {
        return true;
    }
    full = hpkvm_host_path(j->host, j->path);
    j->fd = qemu_open_old(full, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC,
                          0600);
    if (j->fd < 0) {
        error_setg_errno(errp, errno, "hpkvm: cannot open the journal %s: "
                         "set state-dir= to a writable directory", full);
        return false;
    }
    return true;
}

HpkvmJournal *hpkvm_journal_open(const HpkvmHost *h, const char *state_dir,
                                 Error **errp)
{
    g_autofree char *dir = hpkvm_host_path(h, state_dir);
    g_autoptr(HpkvmJournal) j = g_new0(HpkvmJournal, 1);
    g_autofree char *text = NULL;

    j->host = h;
    j->fd = -1;
    j->path = g_strconcat(state_dir, "/host.journal", NULL);
    j->entries = g_ptr_array_new_with_free_func(entry_free);
    j->originals = g_hash_table_new_full(g_str_hash, g_str_equal, g_free,
                                         NULL);
    if (g_mkdir_with_parents(dir, 0755) < 0) {
        error_setg_errno(errp, errno, "hpkvm: cannot create the state "
                         "directory %s: set state-dir= to a writable "
                         "directory", dir);
        return NULL;
    }
    if (hpkvm_host_read(h, j->path, &text) == 0) {
        load(j, text);
    }
    if (!journal_file(j, errp)) {
        return NULL;
    }
    return g_steal_pointer(&j);
}

void hpkvm_journal_close(HpkvmJournal *j)
{
    if (j->fd >= 0) {
        close(j->fd);
    }
    g_ptr_array_unref(j->entries);
    g_hash_table_unref(j->originals);
    g_free(j->path);
    g_free(j);
}

const char *hpkvm_journal_path(HpkvmJournal *j)
{
    return j->path;
}

bool hpkvm_journal_empty(HpkvmJournal *j)
{
    return !j->entries->len;
}

const char *hpkvm_journal_original(HpkvmJournal *j, HpkvmUndo kind,
                                   const char *key)
{
    g_autofree char *k = index_key(kind, key);

    return g_hash_table_lookup(j->originals, k);
}

bool hpkvm_journal_record(HpkvmJournal *j, HpkvmUndo kind, const char *key,
                          const char *old, Error **errp)
{
    g_autofree char *escaped = g_strescape(old, NULL);
    g_autofree char *line = g_strdup_printf("%c\t%s\t%s\n", kind, key,
                                            escaped);
    size_t len = strlen(line);

    if (hpkvm_journal_original(j, kind, key)) {
        return true;
    }
    if (!journal_file(j, errp)) {
        return false;
    }
    if (write(j->fd, line, len) != len || qemu_fdatasync(j->fd) < 0) {
        error_setg_errno(errp, errno, "hpkvm: cannot write the journal "
                         "%s%s: nothing changed", j->host->root, j->path);
        return false;
    }
    add_entry(j, kind, key, old);
    trace_hpkvm_journal_record(kind, key, old);
    return true;
}

char *hpkvm_journal_task_key(pid_t pid, pid_t tid, uint64_t start)
{
    return g_strdup_printf("%d/%d:%" PRIu64, pid, tid, start);
}

/* The task a key names, if it is still that task. */
static bool same_task(const HpkvmHost *h, const char *key, HpkvmTask *task)
{
    int pid, tid;
    uint64_t start;

    if (sscanf(key, "%d/%d:%" SCNu64, &pid, &tid, &start) != 3) {
        return false;
    }
    return hpkvm_host_task(h, pid, tid, task) && task->start == start;
}

/* Move what is left in a cgroup hpkvm made to its parent, then drop it. */
static int undo_mkdir(const HpkvmHost *h, const char *dir,
                      const char *parent_procs)
{
    g_autofree char *procs = g_strconcat(dir, "/cgroup.procs", NULL);
    g_autofree char *text = NULL;
    g_auto(GStrv) pids = NULL;
    int i;

    if (hpkvm_host_read(h, procs, &text) == 0) {
        pids = g_strsplit(text, "\n", -1);
        for (i = 0; pids[i]; i++) {
            if (*pids[i]) {
                hpkvm_host_append(h, parent_procs, pids[i]);
            }
        }
    }
    return hpkvm_host_rmdir(h, dir);
}

static int undo(const HpkvmHost *h, const JournalEntry *e)
{
    HpkvmTask task;
    HpkvmCpuSet cpus;
    g_autofree char *text = NULL;

    g_autofree char *now = NULL;

    switch (e->kind) {
    case HPKVM_UNDO_WRITE:
        /* Also a change that failed: the kernel refused the new value. */
        if (hpkvm_host_read(h, e->key, &now) == 0 &&
            !strcmp(g_strstrip(now), e->old)) {
            return 0;
        }
        return hpkvm_host_write(h, e->key, e->old);
    case HPKVM_UNDO_MKDIR:
        return undo_mkdir(h, e->key, e->old);
    case HPKVM_UNDO_CONTROLLER:
        text = g_strdup_printf("-%s", e->old);
        return hpkvm_host_write(h, e->key, text);
    case HPKVM_UNDO_MOVE:
        if (!same_task(h, e->key, &task)) {
            return 0;
        }
        text = g_strdup_printf("%d", task.pid);
        return hpkvm_host_append(h, e->old, text);
    case HPKVM_UNDO_AFFINITY:
        if (!same_task(h, e->key, &task)) {
            return 0;
        }
        if (!h->set_affinity) {
            return -ENOSYS;
        }
        if (!hpkvm_cpuset_parse(e->old, &cpus, "journal", NULL)) {
            return -EINVAL;
        }
        return h->set_affinity(task.tid, &cpus);
    }
    return -EINVAL;
}

void hpkvm_journal_replay(HpkvmJournal *j, GPtrArray *failures)
{
    g_autofree char *full = NULL;
    int i;

    for (i = j->entries->len - 1; i >= 0; i--) {
        const JournalEntry *e = g_ptr_array_index(j->entries, i);
        int ret = undo(j->host, e);

        trace_hpkvm_journal_undo(e->kind, e->key, e->old, ret);
        if (ret < 0 && failures) {
            g_ptr_array_add(failures,
                            g_strdup_printf("%c %s <- '%s': %s", e->kind,
                                            e->key, e->old, strerror(-ret)));
        }
    }
    g_ptr_array_set_size(j->entries, 0);
    g_hash_table_remove_all(j->originals);
    full = hpkvm_host_path(j->host, j->path);
    unlink(full);
    close(j->fd);
    j->fd = -1;
}
