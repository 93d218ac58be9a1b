/*
 * hpnet: choosing a network backend by need
 *
 * Copyright (c) 2026 The hpkvm developers
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#ifndef NET_HPNET_SELECT_H
#define NET_HPNET_SELECT_H

#include "qapi/qapi-types-hpnet.h"

/* What the host has for one backend. */
typedef struct HpnetProbe {
    bool available;
    char *reason;               /* what was found, or what is missing */
} HpnetProbe;

/*
 * The backends to try for @need, best first; returns how many.  The
 * decision tree's first choice heads each list; after it come the
 * fallbacks that keep most of what the need asks for.
 */
size_t hpnet_preference(HpnetNeed need, HpnetBackend order[HPNET_BACKEND__MAX]);

/*
 * The backend to use: @forced if given (an error naming what is missing
 * if it is not available), else the first available one in @need's
 * order.  Each backend considered, in order, is appended to @candidates.
 */
bool hpnet_choose(HpnetNeed need, const HpnetBackend *forced,
                  const HpnetProbe probes[HPNET_BACKEND__MAX],
                  HpnetBackend *chosen, HpnetCandidateList **candidates,
                  Error **errp);

#endif
