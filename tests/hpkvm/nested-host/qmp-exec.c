/*
 * qmp-exec: send QMP commands to a QEMU and print the replies
 *
 *   qmp-exec SOCKET COMMAND-JSON...
 *   qmp-exec -e EVENT SOCKET COMMAND-JSON...
 *   qmp-exec -l SOCKET REQUEST-JSON
 *
 * Inside the nested test host there is no Python and busybox's nc cannot
 * speak to a unix socket, so payload scripts use this: it connects, leaves
 * capabilities negotiation, sends each command and prints each reply as
 * one line of JSON (events are skipped).  A command given as a bare name
 * ("quit") is wrapped as {"execute": NAME}.  Exits 1 if a reply is an
 * error or the connection fails.  Built static, it needs no library.
 *
 * With -e, after the commands it waits for the event EVENT (or takes the
 * one that came while they ran) and prints it as one line: a payload
 * runs it in the background on a second QMP socket of its own, and
 * waits for the command's reply line before it causes the event.
 *
 * With -l, the one request goes as one line with no greeting and no
 * negotiation, and the one reply line is printed: qemu-hpkvm-helper's
 * protocol (hpkvm-helper-proto.h), so that a payload can wait for the
 * helper to have served what came before.
 *
 * A reply that does not come within REPLY_TIMEOUT_S seconds fails the
 * command, with a message naming it: a QEMU stuck in the payload then
 * fails its test by name instead of holding it until the nested host's
 * own timeout.
 *
 * Copyright (c) 2026 The hpkvm developers
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

/* Longer than any QMP command of the payloads takes under TCG. */
#define REPLY_TIMEOUT_S 120

static FILE *in;
static FILE *out;
/* -e: the event's name as it appears in QMP's JSON, and the event. */
static char wanted[128];
static char *event;

/* Read one reply line, skipping asynchronous events but the wanted. */
static char *read_reply(void)
{
    static char *line;
    static size_t cap;

    for (;;) {
        if (getline(&line, &cap, in) < 0) {
            return NULL;
        }
        if (!strstr(line, "\"event\"")) {
            return line;
        }
        if (*wanted && !event && strstr(line, wanted)) {
            event = strdup(line);
        }
    }
}

/* -e: wait for the wanted event (unless it came already); print it. */
static bool wait_event(const char *name)
{
    char *line = NULL;
    size_t cap = 0;

    while (!event) {
        if (getline(&line, &cap, in) < 0) {
            fprintf(stderr, "qmp-exec: no %s event within %d s\n", name,
                    REPLY_TIMEOUT_S);
            return false;
        }
        if (strstr(line, wanted)) {
            event = line;
        }
    }
    fputs(event, stdout);
    fflush(stdout);
    return true;
}

static bool execute(const char *cmd, bool print)
{
    char *reply;

    if (cmd[0] == '{') {
        fprintf(out, "%s\n", cmd);
    } else {
        fprintf(out, "{\"execute\": \"%s\"}\n", cmd);
    }
    fflush(out);
    reply = read_reply();
    if (!reply) {
        /* "quit" closes the connection; anything else should not. */
        if (strstr(cmd, "quit")) {
            return true;
        }
        if (ferror(in)) {
            fprintf(stderr, "qmp-exec: no reply to %s within %d s\n", cmd,
                    REPLY_TIMEOUT_S);
        } else {
            fprintf(stderr, "qmp-exec: no reply to %s: the connection "
                    "closed\n", cmd);
        }
        return false;
    }
    if (print) {
        fputs(reply, stdout);
    }
    return strstr(reply, "\"return\"") != NULL;
}

int main(int argc, char **argv)
{
    struct sockaddr_un addr = { .sun_family = AF_UNIX };
    struct timeval reply_timeout = { .tv_sec = REPLY_TIMEOUT_S };
    const char *prog = argv[0], *event_name = NULL;
    bool ok = true, line = false;
    int fd, i;

    if (argc > 1 && !strcmp(argv[1], "-l")) {
        line = true;
        argv++;
        argc--;
    } else if (argc > 2 && !strcmp(argv[1], "-e")) {
        event_name = argv[2];
        snprintf(wanted, sizeof(wanted), "\"event\": \"%s\"", event_name);
        argv += 2;
        argc -= 2;
    }
    if (argc < 3 || (line && argc != 3)) {
        fprintf(stderr, "usage: %s SOCKET COMMAND-JSON...\n"
                "       %s -e EVENT SOCKET COMMAND-JSON...\n"
                "       %s -l SOCKET REQUEST-JSON\n", prog, prog, prog);
        return 2;
    }
    fd = socket(AF_UNIX, SOCK_STREAM, 0);
    if (fd < 0 || strlen(argv[1]) >= sizeof(addr.sun_path)) {
        perror("qmp-exec: socket");
        return 1;
    }
    strcpy(addr.sun_path, argv[1]);
    if (connect(fd, (struct sockaddr *)&addr, sizeof(addr)) < 0) {
        perror("qmp-exec: connect");
        return 1;
    }
    if (setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &reply_timeout,
                   sizeof(reply_timeout)) < 0) {
        perror("qmp-exec: SO_RCVTIMEO");
        return 1;
    }
    in = fdopen(fd, "r");
    out = fdopen(dup(fd), "w");
    if (line) {
        return in && out && execute(argv[2], true) ? 0 : 1;
    }
    if (!in || !out || !read_reply() || !execute("qmp_capabilities", false)) {
        fprintf(stderr, "qmp-exec: no QMP greeting on %s\n", argv[1]);
        return 1;
    }
    for (i = 2; i < argc; i++) {
        ok &= execute(argv[i], true);
        fflush(stdout);
    }
    if (ok && event_name) {
        ok = wait_event(event_name);
    }
    return ok ? 0 : 1;
}
