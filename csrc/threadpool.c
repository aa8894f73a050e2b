/* threadpool.c: placeholder, runs the task on the calling thread. */
#include "infer_kernels.h"

static int n_threads = 1;
void infer_parallel_run(infer_task_fn fn, void *arg) { fn(arg, 0, 1); }
void infer_set_num_threads(int n) { n_threads = n < 1 ? 1 : n; }
int infer_get_num_threads(void) { return n_threads; }
int infer_default_num_threads(void) { return 1; }
