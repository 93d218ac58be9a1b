/*
 * hpkvm: the journal of host changes, and their undoing
 *
 * One line per change: the kind, the key, the old value (escaped) and a
 * CRC-32C of the three, separated by tabs.  A torn last line (a crash
 * while appending) is dropped: its change was not made yet.  A line
 * that fails its checksum or the allow-list of journal_refusal() (the
 * files and value shapes hpkvm itself changes) is never undone: it is
 * set aside in host.journal.rejected and reported.  Records of an hpkvm
 * from before the checksums pass the allow-list or are set aside too.
 * What could not be undone stays in the journal, retried at the next
 * replay; the file goes only when nothing is left.
 *
 * Copyright (c) 2026 The hpkvm developers
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include "qemu/osdep.h"
#include "qemu/cutils.h"
#include "qemu/ctype.h"
#include "qemu/crc32c.h"
#include "qemu/error-report.h"
#include "qapi/error.h"
#include "hpkvm-journal.h"
#include "hpkvm-state-dir.h"
#include "trace.h"

typedef struct JournalEntry {
    HpkvmUndo kind;
    char *key;
    char *old;
} JournalEntry;

struct HpkvmJournal {
    const HpkvmHost *host;
    char *path;                 /* on the host, under the root */
    char *dir;                  /* the state directory, as shown */
    int dfd;                    /* the state directory */
    int fd;                     /* to append to, or -1 */
    char *mount;                /* the cpuset hierarchy, or NULL */
    bool v2;
    GPtrArray *entries;         /* oldest first */
    GHashTable *originals;      /* "K key" -> old */
};

#define JOURNAL_FILE "host.journal"
#define JOURNAL_NEW "host.journal.new"
#define JOURNAL_REJECTED "host.journal.rejected"

static void journal_entry_free(gpointer p)
{
    JournalEntry *e = p;

    g_free(e->key);
    g_free(e->old);
    g_free(e);
}

static char *journal_index_key(HpkvmUndo kind, const char *key)
{
    return g_strdup_printf("%c %s", kind, key);
}

/* "K<TAB>key<TAB>old": what the checksum covers. */
static char *journal_body(HpkvmUndo kind, const char *key, const char *old)
{
    g_autofree char *escaped = g_strescape(old, NULL);

    return g_strdup_printf("%c\t%s\t%s", kind, key, escaped);
}

static uint32_t journal_crc(const char *body)
{
    return crc32c(0xffffffff, (const uint8_t *)body, strlen(body));
}

static char *journal_line(const JournalEntry *e)
{
    g_autofree char *body = journal_body(e->kind, e->key, e->old);

    return g_strdup_printf("%s\t%08x\n", body, journal_crc(body));
}

/* A clean path (see hpkvm-host.h) of printable characters only. */
static bool journal_clean_path(const char *path)
{
    const char *c;

    for (c = path; *c; c++) {
        if (!g_ascii_isgraph(*c)) {
            return false;
        }
    }
    return hpkvm_host_path_is_clean(path);
}

/* @path is <mount><rel>/@leaf for a non-empty, clean @rel. */
static bool journal_cgroup_file(HpkvmJournal *j, const char *path,
                                const char *leaf)
{
    size_t m = j->mount ? strlen(j->mount) : 0;
    size_t p = strlen(path), l = strlen(leaf);

    return j->mount && p > m + l + 2 && !strncmp(path, j->mount, m) &&
           path[m] == '/' && path[p - l - 1] == '/' &&
           !strcmp(path + p - l, leaf);
}

static bool journal_is(HpkvmJournal *j, const char *path, const char *leaf)
{
    g_autofree char *want = j->mount ? g_strconcat(j->mount, "/", leaf, NULL)
                                     : NULL;

    return want && !strcmp(path, want);
}

static bool journal_task_key_valid(const char *key)
{
    int pid, tid, n = 0;
    uint64_t start;

    return sscanf(key, "%d/%d:%" SCNu64 "%n", &pid, &tid, &start, &n) == 3 &&
           !key[n] && pid > 0 && tid > 0 &&
           qemu_isdigit(key[strlen(key) - 1]);
}

static bool journal_cpus_valid(const char *text, bool empty_ok)
{
    HpkvmCpuSet cpus;

    if (!*text) {
        return empty_ok;
    }
    return hpkvm_cpuset_parse(text, &cpus, "journal", NULL) &&
           (empty_ok || !hpkvm_cpuset_empty(&cpus));
}

static bool journal_mask_valid(const char *text)
{
    HpkvmCpuSet cpus;

    return *text && hpkvm_cpuset_parse_mask(text, &cpus, "journal", NULL) &&
           !hpkvm_cpuset_empty(&cpus);
}

/*
 * The allow-list: the only changes hpkvm makes, each with the shape of
 * its old value.  Anything else, whoever wrote it, is never undone.
 */
static const char *journal_refusal(HpkvmJournal *j, HpkvmUndo kind,
                                   const char *key, const char *old)
{
    unsigned irq;
    int n = 0;

    switch (kind) {
    case HPKVM_UNDO_WRITE:
        if (!journal_clean_path(key)) {
            return "not a clean absolute path";
        }
        if (!strcmp(key, "/proc/irq/default_smp_affinity") ||
            !strcmp(key, "/sys/devices/virtual/workqueue/cpumask")) {
            return journal_mask_valid(old) ? NULL : "not a CPU mask";
        }
        if (sscanf(key, "/proc/irq/%u/smp_affinity_list%n", &irq, &n) == 1 &&
            !key[n] && qemu_isdigit(key[strlen("/proc/irq/")])) {
            return journal_cpus_valid(old, false) ? NULL : "not a CPU list";
        }
        if (journal_cgroup_file(j, key, "cpuset.cpus")) {
            return journal_cpus_valid(old, true) ? NULL : "not a CPU list";
        }
        return "not an IRQ affinity, CPU mask or cpuset file hpkvm changes";
    case HPKVM_UNDO_MKDIR:
        return journal_is(j, key, "hpkvm.host") &&
               journal_is(j, old, "cgroup.procs") ? NULL :
               "not hpkvm's own cgroup under the cpuset hierarchy";
    case HPKVM_UNDO_CONTROLLER:
        return j->v2 && journal_is(j, key, "cgroup.subtree_control") &&
               !strcmp(old, "cpuset") ? NULL :
               "not the cpuset controller of the cgroup2 root";
    case HPKVM_UNDO_MOVE:
        return journal_task_key_valid(key) &&
               journal_is(j, old, "cgroup.procs") ? NULL :
               "not a task moved out of the root cgroup";
    case HPKVM_UNDO_AFFINITY:
        return journal_task_key_valid(key) && journal_cpus_valid(old, false)
               ? NULL : "not a task's CPU affinity";
    }
    return "unknown kind of change";
}

static void journal_add(HpkvmJournal *j, HpkvmUndo kind, const char *key,
                        const char *old)
{
    JournalEntry *e = g_new0(JournalEntry, 1);

    e->kind = kind;
    e->key = g_strdup(key);
    e->old = g_strdup(old);
    g_ptr_array_add(j->entries, e);
    g_hash_table_insert(j->originals, journal_index_key(kind, key), e->old);
}

/*
 * One line; NULL if accepted, else why not.  A record of an hpkvm from
 * before the checksums (three fields) is taken if the allow-list takes
 * it, and sets *@legacy: a hot upgrade from it must still restore the
 * host.  The checksum is against damage; the allow-list is what keeps a
 * record, whoever wrote it, to hpkvm's own changes.
 */
static const char *journal_parse(HpkvmJournal *j, const char *line,
                                 bool *legacy)
{
    g_auto(GStrv) f = g_strsplit(line, "\t", 4);
    g_autofree char *body = NULL;
    g_autofree char *old = NULL;
    unsigned crc;
    int n = 0;
    const char *why;

    if (g_strv_length(f) == 3 && strlen(f[0]) == 1) {
        *legacy = true;
    } else if (g_strv_length(f) != 4 || strlen(f[0]) != 1) {
        return "not a record of four fields";
    } else {
        body = g_strdup_printf("%s\t%s\t%s", f[0], f[1], f[2]);
        if (strlen(f[3]) != 8 || sscanf(f[3], "%8x%n", &crc, &n) != 1 ||
            n != 8 || crc != journal_crc(body)) {
            return "bad checksum";
        }
    }
    old = g_strcompress(f[2]);
    why = journal_refusal(j, f[0][0], f[1], old);
    if (!why) {
        journal_add(j, f[0][0], f[1], old);
    }
    return why;
}

/* Write every entry to the journal again, or remove it when none is left */
static bool journal_rewrite(HpkvmJournal *j, Error **errp)
{
    g_autoptr(GString) text = g_string_new("");
    int fd, i;

    if (j->fd >= 0) {
        close(j->fd);
        j->fd = -1;
    }
    if (!j->entries->len) {
        if (unlinkat(j->dfd, JOURNAL_FILE, 0) < 0 && errno != ENOENT) {
            error_setg_errno(errp, errno, "cannot remove %s/" JOURNAL_FILE,
                             j->dir);
            return false;
        }
        return true;
    }
    for (i = 0; i < j->entries->len; i++) {
        g_autofree char *line = journal_line(g_ptr_array_index(j->entries,
                                                               i));

        g_string_append(text, line);
    }
    fd = hpkvm_state_file_open(j->dfd, j->dir, JOURNAL_NEW,
                               O_WRONLY | O_CREAT | O_TRUNC, errp);
    if (fd < 0) {
        return false;
    }
    if (qemu_write_full(fd, text->str, text->len) != text->len ||
        qemu_fdatasync(fd) < 0) {
        error_setg_errno(errp, errno, "cannot write %s/" JOURNAL_NEW,
                         j->dir);
        close(fd);
        unlinkat(j->dfd, JOURNAL_NEW, 0);
        return false;
    }
    close(fd);
    if (renameat(j->dfd, JOURNAL_NEW, j->dfd, JOURNAL_FILE) < 0) {
        error_setg_errno(errp, errno, "cannot replace %s/" JOURNAL_FILE,
                         j->dir);
        return false;
    }
    fsync(j->dfd);
    return true;
}

/* Drop a torn last line in place: unlike a rewrite it needs no space. */
static bool journal_cut(HpkvmJournal *j, off_t length, Error **errp)
{
    int fd = hpkvm_state_file_open(j->dfd, j->dir, JOURNAL_FILE, O_WRONLY,
                                   errp);
    bool ok;

    if (fd < 0) {
        return false;
    }
    ok = ftruncate(fd, length) == 0 && qemu_fdatasync(fd) == 0;
    if (!ok) {
        error_setg_errno(errp, errno, "cannot cut the torn last line of "
                         "%s/" JOURNAL_FILE, j->dir);
    }
    close(fd);
    return ok;
}

/* Refused lines go beside the journal, for the operator, once. */
static void journal_set_aside(HpkvmJournal *j, GString *rejected)
{
    int fd = hpkvm_state_file_open(j->dfd, j->dir, JOURNAL_REJECTED,
                                   O_WRONLY | O_CREAT | O_APPEND, NULL);

    /* Best effort: the warnings name what was refused all the same. */
    if (fd >= 0) {
        if (qemu_write_full(fd, rejected->str, rejected->len) !=
            rejected->len) {
            warn_report("cannot keep the refused journal lines in %s/"
                        JOURNAL_REJECTED ": %s", j->dir, strerror(errno));
        }
        qemu_fdatasync(fd);
        close(fd);
    }
}

static bool journal_load(HpkvmJournal *j, Error **errp)
{
    g_autoptr(GString) rejected = g_string_new("");
    g_autofree char *text = NULL;
    g_auto(GStrv) lines = NULL;
    g_autoptr(GError) gerr = NULL;
    g_autoptr(GIOChannel) ch = NULL;
    Error *local_err = NULL;
    bool legacy = false;
    gsize len = 0;
    int fd, i;

    fd = hpkvm_state_file_open(j->dfd, j->dir, JOURNAL_FILE, O_RDONLY,
                               &local_err);
    if (fd == -ENOENT) {
        error_free(local_err);
        return true;
    }
    if (fd < 0) {
        error_propagate(errp, local_err);
        return false;
    }
    ch = g_io_channel_unix_new(fd);
    g_io_channel_set_close_on_unref(ch, true);
    g_io_channel_set_encoding(ch, NULL, NULL);
    if (g_io_channel_read_to_end(ch, &text, &len, &gerr) !=
        G_IO_STATUS_NORMAL) {
        error_setg(errp, "cannot read %s/" JOURNAL_FILE ": %s", j->dir,
                   gerr->message);
        return false;
    }
    lines = g_strsplit(text ?: "", "\n", -1);
    /* The last piece is what follows the last newline: a torn append. */
    for (i = 0; lines[i] && lines[i + 1]; i++) {
        const char *why = journal_parse(j, lines[i], &legacy);

        if (why) {
            warn_report("%s/" JOURNAL_FILE " line %d refused (%s): "
                        "it is never undone; kept in " JOURNAL_REJECTED,
                        j->dir, i + 1, why);
            g_string_append_printf(rejected, "%s\n", lines[i]);
        }
    }
    if (rejected->len) {
        journal_set_aside(j, rejected);
    }
    if (rejected->len || legacy) {
        /* Without them, and older records with their checksums now. */
        return journal_rewrite(j, errp);
    }
    if (lines[0] && lines[i] && *lines[i]) {
        /* Cut, where it is, so that no append is merged into it. */
        return journal_cut(j, len - strlen(lines[i]), errp);
    }
    return true;
}

/* Open (again, after a replay removed it) the file to append to. */
static bool journal_file(HpkvmJournal *j, Error **errp)
{
    ERRP_GUARD();
    int fd;

    if (j->fd >= 0) {
        return true;
    }
    fd = hpkvm_state_file_open(j->dfd, j->dir, JOURNAL_FILE,
                               O_WRONLY | O_CREAT | O_APPEND, errp);
    if (fd < 0) {
        error_prepend(errp, "cannot open the journal of host changes: ");
        return false;
    }
    j->fd = fd;
    return true;
}

HpkvmJournal *hpkvm_journal_open(const HpkvmHost *h, const char *state_dir,
                                 Error **errp)
{
    g_autoptr(HpkvmJournal) j = g_new0(HpkvmJournal, 1);

    j->host = h;
    j->fd = -1;
    j->path = g_strconcat(state_dir, "/" JOURNAL_FILE, NULL);
    j->dir = g_strconcat(h->root, state_dir, NULL);
    j->entries = g_ptr_array_new_with_free_func(journal_entry_free);
    j->originals = g_hash_table_new_full(g_str_hash, g_str_equal, g_free,
                                         NULL);
    j->mount = hpkvm_host_cpuset_mount(h, &j->v2);
    j->dfd = hpkvm_state_dir_open(h, state_dir, NULL, errp);
    if (j->dfd < 0 || !journal_load(j, errp)) {
        return NULL;
    }
    return g_steal_pointer(&j);
}

void hpkvm_journal_close(HpkvmJournal *j)
{
    if (j->fd >= 0) {
        close(j->fd);
    }
    if (j->dfd >= 0) {
        close(j->dfd);
    }
    g_ptr_array_unref(j->entries);
    g_hash_table_unref(j->originals);
    g_free(j->path);
    g_free(j->dir);
    g_free(j->mount);
    g_free(j);
}

const char *hpkvm_journal_cpuset_mount(HpkvmJournal *j, bool *v2)
{
    *v2 = j->v2;
    return j->mount;
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
    g_autofree char *k = journal_index_key(kind, key);

    return g_hash_table_lookup(j->originals, k);
}

bool hpkvm_journal_record(HpkvmJournal *j, HpkvmUndo kind, const char *key,
                          const char *old, Error **errp)
{
    JournalEntry e = { .kind = kind, .key = (char *)key, .old = (char *)old };
    g_autofree char *line = NULL;
    const char *why;
    ssize_t ret;
    size_t len;
    off_t end;

    if (hpkvm_journal_original(j, kind, key)) {
        return true;
    }
    /* What replay would refuse is not changed either. */
    why = journal_refusal(j, kind, key, old);
    if (why) {
        error_setg(errp, "refusing to change %s: %s", key, why);
        return false;
    }
    if (!journal_file(j, errp)) {
        return false;
    }
    line = journal_line(&e);
    len = strlen(line);
    end = lseek(j->fd, 0, SEEK_END);
    /* qemu_write_full() leaves errno set when it wrote less. */
    ret = qemu_write_full(j->fd, line, len);
    if (ret != len || qemu_fdatasync(j->fd) < 0) {
        int err = errno;

        /* No torn record: the file shrinks back, needing no space. */
        if (end >= 0 && ftruncate(j->fd, end) == 0) {
            qemu_fdatasync(j->fd);
        }
        error_setg_errno(errp, err, "cannot write the journal "
                         "%s/" JOURNAL_FILE ": nothing changed", j->dir);
        return false;
    }
    journal_add(j, kind, key, old);
    trace_hpkvm_journal_record(kind, key, old);
    return true;
}

bool hpkvm_journal_forget(HpkvmJournal *j, HpkvmUndo kind, const char *key)
{
    g_autofree char *k = journal_index_key(kind, key);
    JournalEntry *e;
    Error *err = NULL;

    if (!j->entries->len) {
        return false;
    }
    e = g_ptr_array_index(j->entries, j->entries->len - 1);
    if (e->kind != kind || strcmp(e->key, key)) {
        return false;
    }
    g_ptr_array_steal_index(j->entries, j->entries->len - 1);
    g_hash_table_remove(j->originals, k);
    if (!journal_rewrite(j, &err)) {
        g_ptr_array_add(j->entries, e);
        g_hash_table_insert(j->originals, g_steal_pointer(&k), e->old);
        error_free(err);
        return false;
    }
    trace_hpkvm_journal_forget(kind, key);
    journal_entry_free(e);
    return true;
}

char *hpkvm_journal_task_key(pid_t pid, pid_t tid, uint64_t start)
{
    return g_strdup_printf("%d/%d:%" PRIu64, pid, tid, start);
}

/* The task a key names, if it is still that task. */
static bool journal_same_task(const HpkvmHost *h, const char *key,
                              HpkvmTask *task)
{
    int pid, tid;
    uint64_t start;

    if (sscanf(key, "%d/%d:%" SCNu64, &pid, &tid, &start) != 3) {
        return false;
    }
    return hpkvm_host_task(h, pid, tid, task) && task->start == start;
}

/* Move what is left in a cgroup hpkvm made to its parent, then drop it. */
/* A task forking inside the cgroup between the move and the rmdir. */
#define JOURNAL_RMDIR_TRIES 10

static int journal_undo_mkdir(const HpkvmHost *h, const char *dir,
                              const char *parent_procs)
{
    g_autofree char *procs = g_strconcat(dir, "/cgroup.procs", NULL);
    int i, try, ret = -EBUSY;

    /*
     * The cgroup must be empty to go: move what is in it, again if a
     * task forked there meanwhile (rmdir says EBUSY).
     */
    for (try = 0; try < JOURNAL_RMDIR_TRIES && ret == -EBUSY; try++) {
        g_autofree char *text = NULL;
        g_auto(GStrv) pids = NULL;

        if (hpkvm_host_read(h, procs, &text) == 0) {
            pids = g_strsplit(text, "\n", -1);
            for (i = 0; pids[i]; i++) {
                if (*pids[i]) {
                    hpkvm_host_append(h, parent_procs, pids[i]);
                }
            }
        }
        ret = hpkvm_host_rmdir(h, dir);
    }
    return ret;
}

static int journal_undo(const HpkvmHost *h, const JournalEntry *e)
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
        return journal_undo_mkdir(h, e->key, e->old);
    case HPKVM_UNDO_CONTROLLER:
        text = g_strdup_printf("-%s", e->old);
        return hpkvm_host_write(h, e->key, text);
    case HPKVM_UNDO_MOVE:
        if (!journal_same_task(h, e->key, &task)) {
            return 0;
        }
        text = g_strdup_printf("%d", task.pid);
        return hpkvm_host_append(h, e->old, text);
    case HPKVM_UNDO_AFFINITY:
        if (!journal_same_task(h, e->key, &task)) {
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
    g_autoptr(GPtrArray) done = j->entries;
    Error *err = NULL;
    int i;

    j->entries = g_ptr_array_new_with_free_func(journal_entry_free);
    g_hash_table_remove_all(j->originals);
    for (i = done->len - 1; i >= 0; i--) {
        JournalEntry *e = g_ptr_array_index(done, i);
        int ret = journal_undo(j->host, e);

        trace_hpkvm_journal_undo(e->kind, e->key, e->old, ret);
        /* Gone (an IRQ, a cgroup, a task) is nothing left to undo. */
        if (ret < 0 && ret != -ENOENT && ret != -ESRCH) {
            if (failures) {
                g_ptr_array_add(failures,
                                g_strdup_printf("%c %s <- '%s': %s; kept "
                                                "in the journal, retried "
                                                "later", e->kind, e->key,
                                                e->old, strerror(-ret)));
            }
            /* Kept, in the order recorded; undone newest first again. */
            g_ptr_array_insert(j->entries, 0,
                               g_ptr_array_steal_index(done, i));
            g_hash_table_insert(j->originals,
                                journal_index_key(e->kind, e->key), e->old);
        }
    }
    if (!journal_rewrite(j, &err)) {
        if (failures) {
            g_ptr_array_add(failures, g_strdup(error_get_pretty(err)));
        }
        error_free(err);
    }
}
