#include "trace/trace-net_hpnet.h"
