/*
 * hpkvm: the state directory of the core leases and the journal
 *
 * Copyright (c) 2026 The hpkvm developers
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include "qemu/osdep.h"
#include "qapi/error.h"
#include "hpkvm-state-dir.h"

/* Ours, of the type expected, and closed to others as far as @deny says */
static bool state_check(int fd, const char *shown, bool dir, mode_t deny,
                        Error **errp)
{
    ERRP_GUARD();
    struct stat st;

    if (fstat(fd, &st) < 0) {
        error_setg_errno(errp, errno, "cannot check %s", shown);
        return false;
    }
    if (dir ? !S_ISDIR(st.st_mode) : !S_ISREG(st.st_mode)) {
        error_setg(errp, "%s is not a %s", shown,
                   dir ? "directory" : "regular file");
        error_append_hint(errp, "Remove it; hpkvm creates what it needs "
                          "itself.\n");
        return false;
    }
    if (st.st_uid != geteuid()) {
        error_setg(errp, "%s belongs to uid %u, not to this user (uid %u)",
                   shown, (unsigned)st.st_uid, (unsigned)geteuid());
        error_append_hint(errp, "hpkvm trusts only its own state: remove "
                          "it, or chown it to the user running hpkvm.\n");
        return false;
    }
    if (st.st_mode & deny) {
        error_setg(errp, "%s has mode %04o: others may change it", shown,
                   (unsigned)(st.st_mode & 07777));
        error_append_hint(errp, "hpkvm trusts only state no one else can "
                          "change: chmod %s %s\n", dir ? "0700" : "0600",
                          shown);
        return false;
    }
    return true;
}

/* One directory below @parent, made 0700 if missing, then checked. */
static int state_subdir(int parent, const char *name, const char *shown,
                        Error **errp)
{
    ERRP_GUARD();
    int fd;

    if (mkdirat(parent, name, 0700) < 0 && errno != EEXIST) {
        error_setg_errno(errp, errno, "cannot create %s", shown);
        error_append_hint(errp, "Run hpkvm as a user that may create it "
                          "(root on a real host).\n");
        return -1;
    }
    fd = openat(parent, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW |
                O_CLOEXEC);
    if (fd < 0 && (errno == ENOTDIR || errno == ELOOP)) {
        error_setg(errp, "%s is not a directory (hpkvm never follows a "
                   "symbolic link there)", shown);
        error_append_hint(errp, "Remove it; hpkvm creates it itself.\n");
        return -1;
    }
    if (fd < 0) {
        error_setg_errno(errp, errno, "cannot open %s", shown);
        return -1;
    }
    if (!state_check(fd, shown, true, 077, errp)) {
        close(fd);
        return -1;
    }
    return fd;
}

int hpkvm_state_dir_open(const HpkvmHost *h, const char *state_dir,
                         const char *sub, Error **errp)
{
    ERRP_GUARD();
    g_autofree char *shown = g_strconcat(h->root, state_dir, NULL);
    g_autofree char *shown_sub = NULL;
    g_autofree char *name = NULL;
    int parent, fd, subfd;

    if (h->real && g_strcmp0(state_dir, HPKVM_STATE_DIR)) {
        error_setg(errp, "state directory %s: on the real host the leases "
                   "and the journal live in " HPKVM_STATE_DIR " (x-state-dir= "
                   "is for fake host trees)", state_dir);
        error_append_hint(errp, "One lease domain per host: a second one "
                          "could lease a core twice.  x-state-dir= is for "
                          "fake host trees (x-host-root=) in tests.\n");
        return -1;
    }
    parent = hpkvm_host_open_parent(h, state_dir, &name);
    if (parent == -ENOENT && !h->real) {
        /* A fake tree may lack /run; the walk below checks what is made */
        g_autofree char *dir = g_path_get_dirname(shown);

        g_mkdir_with_parents(dir, 0755);
        parent = hpkvm_host_open_parent(h, state_dir, &name);
    }
    if (parent < 0) {
        error_setg_errno(errp, -parent, "cannot open the directory above "
                         "the state directory %s", shown);
        error_append_hint(errp, "Every component of its path must exist "
                          "and none may be a symbolic link.\n");
        return -1;
    }
    fd = state_subdir(parent, name, shown, errp);
    close(parent);
    if (fd < 0 || !sub) {
        return fd;
    }
    shown_sub = g_strdup_printf("%s/%s", shown, sub);
    subfd = state_subdir(fd, sub, shown_sub, errp);
    close(fd);
    return subfd;
}

int hpkvm_state_file_open(int dfd, const char *dir, const char *name,
                          int flags, Error **errp)
{
    ERRP_GUARD();
    g_autofree char *shown = g_strdup_printf("%s/%s", dir, name);
    int fd = openat(dfd, name, flags | O_NOFOLLOW | O_CLOEXEC, 0600);
    int err = errno;

    if (fd < 0 && err == ELOOP) {
        error_setg(errp, "%s is a symbolic link, which hpkvm never follows "
                   "in its state directory", shown);
        error_append_hint(errp, "Remove it; hpkvm creates it itself.\n");
        return -err;
    }
    if (fd < 0) {
        error_setg_errno(errp, err, "cannot open %s", shown);
        return -err;
    }
    if (!state_check(fd, shown, false, 022, errp)) {
        close(fd);
        return -EPERM;
    }
    return fd;
}
