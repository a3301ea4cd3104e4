/* The check of the C programs that test lib/ibverbs through rdma-core's
   stock header (ibverbs_client.c, ibverbs_rc.c): on failure, print the
   condition, its line and errno, and return 1 from the calling check. */
#pragma once

#include <errno.h>
#include <stdio.h>

#define CHECK(cond)                                                         \
  do {                                                                      \
    if (!(cond)) {                                                          \
      fprintf(stderr, "%s:%d: check failed: %s (errno %d)\n", __FILE__,     \
              __LINE__, #cond, errno);                                      \
      return 1;                                                             \
    }                                                                       \
  } while (0)
