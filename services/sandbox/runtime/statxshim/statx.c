/*
 * statx.c: an LD_PRELOAD shim for the agent code sandboxes.
 *
 * gVisor releases before 2023 (Debian 12's runsc 0.0~20221219 among them)
 * answer statx(2) with EINVAL when its flags hold AT_NO_AUTOMOUNT, which
 * coreutils 9 always passes: `ls`, `ls -l`, `stat`, `cp -a` and `find`
 * fail on every file ("cannot access ...: Invalid argument"). Linux never
 * automounts on statx anyway unless asked, and gVisor has no automounts,
 * so dropping the flag changes nothing but the error. Newer gVisor ignores
 * the flag itself; the shim is then a no-op.
 *
 * Built by build.sh (gcc, x86_64); the runtime embeds statx-amd64.so and
 * preloads it in sandboxes on amd64 only.
 */
#define _GNU_SOURCE
#include <sys/syscall.h>
#include <unistd.h>

#define SHIM_AT_NO_AUTOMOUNT 0x800

struct statx;

int statx(int dirfd, const char *path, int flags, unsigned int mask, struct statx *buf)
{
	return (int)syscall(SYS_statx, dirfd, path, flags & ~SHIM_AT_NO_AUTOMOUNT, mask, buf);
}
