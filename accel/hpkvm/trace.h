#include "trace/trace-accel_hpkvm.h"
