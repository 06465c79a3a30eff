/* A disk that freezes on demand, for process-level tests: loaded with LD_PRELOAD, it makes fsync and
 * fdatasync wait while the file named by FSYNC_STALL_FILE exists (polled every 5 ms), then sync as usual. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static void wait_while_frozen(void) {
    const char *flag = getenv("FSYNC_STALL_FILE");
    struct timespec pause = {0, 5 * 1000 * 1000};
    while (flag != NULL && access(flag, F_OK) == 0) {
        nanosleep(&pause, NULL);
    }
}

int fsync(int fd) {
    static int (*real)(int) = NULL;
    if (real == NULL) real = (int (*)(int))dlsym(RTLD_NEXT, "fsync");
    wait_while_frozen();
    return real(fd);
}

int fdatasync(int fd) {
    static int (*real)(int) = NULL;
    if (real == NULL) real = (int (*)(int))dlsym(RTLD_NEXT, "fdatasync");
    wait_while_frozen();
    return real(fd);
}
