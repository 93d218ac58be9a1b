/*
 * hpkvm: the journal of host changes, and their undoing
 *
 * Before hpkvm changes anything on the host it appends the old value to
 * <state-dir>/host.journal (in the trusted state directory of
 * hpkvm-state-dir.h) and syncs it.  Only the kinds of change hpkvm
 * makes, with values of their shape, can be recorded or replayed.  The
 * journal is host-wide, like the leases, and changed only under
 * hpkvm_leases_lock_host(): it holds
 * the state from before the first lease, whichever VM made each change.
 * Replaying it, newest first, puts the host back as it was; that happens
 * when the last lease goes, whether its VM exited, was killed or the
 * recovery tool found it gone.
 *
 * Copyright (c) 2026 The hpkvm developers
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#ifndef ACCEL_HPKVM_JOURNAL_H
#define ACCEL_HPKVM_JOURNAL_H

#include "hpkvm-host.h"

typedef enum HpkvmUndo {
    HPKVM_UNDO_WRITE = 'W',         /* key: a file; old: its content */
    HPKVM_UNDO_MKDIR = 'D',         /* key: a cgroup; old: the parent's */
    HPKVM_UNDO_MOVE = 'P',          /* key: "pid:start"; old: its cgroup */
    HPKVM_UNDO_AFFINITY = 'A',      /* key: "pid/tid:start"; old: CPUs */
    HPKVM_UNDO_CONTROLLER = 'C',    /* key: subtree_control; old: name */
} HpkvmUndo;

typedef struct HpkvmJournal HpkvmJournal;

HpkvmJournal *hpkvm_journal_open(const HpkvmHost *h, const char *state_dir,
                                 Error **errp);
void hpkvm_journal_close(HpkvmJournal *j);
G_DEFINE_AUTOPTR_CLEANUP_FUNC(HpkvmJournal, hpkvm_journal_close)

/* The host file the journal lives in. */
const char *hpkvm_journal_path(HpkvmJournal *j);
bool hpkvm_journal_empty(HpkvmJournal *j);
/*
 * The cpuset hierarchy the journal's cgroup records must lie in (NULL:
 * none), as found when it was opened; *@v2 if it is cgroup2.
 */
const char *hpkvm_journal_cpuset_mount(HpkvmJournal *j, bool *v2);

/* The value recorded before the first change of @key, or NULL. */
const char *hpkvm_journal_original(HpkvmJournal *j, HpkvmUndo kind,
                                   const char *key);
/*
 * Record @old before changing @key, durably; a key already recorded
 * keeps its first, original value.
 */
bool hpkvm_journal_record(HpkvmJournal *j, HpkvmUndo kind, const char *key,
                          const char *old, Error **errp);
/*
 * Take back the newest record, of @key, when the change it preceded
 * changed nothing (the kernel refused it): a record stands where the
 * change was made, and replay undoes newest first, so a record left
 * from a refused first try would be undone in the wrong place once a
 * later try succeeds (cgroup v1 wants parents widened before their
 * children).  False, and the record kept, if it is not the newest or
 * the journal cannot be rewritten; a record of nothing changed is
 * harmless to undo.
 */
bool hpkvm_journal_forget(HpkvmJournal *j, HpkvmUndo kind, const char *key);

/*
 * Undo every change, newest first.  What could not be undone stays in
 * the journal, to be retried by the next replay, and is appended to
 * @failures (a task, an IRQ or a cgroup gone is not a failure); the
 * journal file is removed only when nothing is left.
 */
void hpkvm_journal_replay(HpkvmJournal *j, GPtrArray *failures);

/* Keys of the task records: a task is only touched if still the same. */
char *hpkvm_journal_task_key(pid_t pid, pid_t tid, uint64_t start);

#endif
