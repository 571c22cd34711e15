/* The benchmark's floor: an empty BPF program (r0 = 0; exit) attached with
 * perf uprobes at given file offsets, filtered to one process; the same
 * mechanism bpftrace uses, for the sites bpftrace 0.17 refuses (any offset
 * inside a function in Debian's build, and every uretprobe not at a
 * function's start).
 *
 * Usage: floor PID PATH:OFFSET[:ret]...
 * Prints "Attaching N probes..." once every probe is enabled, then waits for
 * SIGINT or SIGTERM. */
#include <errno.h>
#include <linux/bpf.h>
#include <linux/perf_event.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <unistd.h>

static int read_sysfs(const char *path, char *buf, size_t len)
{
	FILE *f = fopen(path, "r");
	if (!f)
		return -1;
	if (!fgets(buf, (int)len, f)) {
		fclose(f);
		return -1;
	}
	fclose(f);
	return 0;
}

static int load_empty_prog(void)
{
	struct bpf_insn insns[2];
	union bpf_attr attr;
	static char log[4096];

	memset(insns, 0, sizeof(insns));
	insns[0].code = BPF_ALU64 | BPF_MOV | BPF_K; /* r0 = 0 */
	insns[0].dst_reg = BPF_REG_0;
	insns[0].imm = 0;
	insns[1].code = BPF_JMP | BPF_EXIT;

	memset(&attr, 0, sizeof(attr));
	attr.prog_type = BPF_PROG_TYPE_KPROBE;
	attr.insns = (uint64_t)(uintptr_t)insns;
	attr.insn_cnt = 2;
	attr.license = (uint64_t)(uintptr_t) "GPL";
	attr.log_buf = (uint64_t)(uintptr_t)log;
	attr.log_size = sizeof(log);
	attr.log_level = 1;
	int fd = (int)syscall(__NR_bpf, BPF_PROG_LOAD, &attr, sizeof(attr));
	if (fd < 0)
		fprintf(stderr, "floor: BPF_PROG_LOAD: %s\n%s\n", strerror(errno), log);
	return fd;
}

static void on_signal(int sig)
{
	(void)sig;
	_exit(0);
}

int main(int argc, char **argv)
{
	char buf[64];
	if (argc < 3) {
		fprintf(stderr, "usage: floor PID PATH:OFFSET[:ret]...\n");
		return 2;
	}
	pid_t pid = (pid_t)atoi(argv[1]);
	if (read_sysfs("/sys/bus/event_source/devices/uprobe/type", buf, sizeof(buf)) != 0) {
		fprintf(stderr, "floor: no uprobe PMU\n");
		return 1;
	}
	int type = atoi(buf);
	int ret_bit = 0;
	if (read_sysfs("/sys/bus/event_source/devices/uprobe/format/retprobe", buf,
		       sizeof(buf)) == 0 &&
	    strncmp(buf, "config:", 7) == 0)
		ret_bit = atoi(buf + 7);

	int prog = load_empty_prog();
	if (prog < 0)
		return 1;

	signal(SIGINT, on_signal);
	signal(SIGTERM, on_signal);
	for (int i = 2; i < argc; i++) {
		char *spec = strdup(argv[i]);
		int ret = 0;
		char *last = strrchr(spec, ':');
		if (last && strcmp(last, ":ret") == 0) {
			ret = 1;
			*last = 0;
			last = strrchr(spec, ':');
		}
		if (!last) {
			fprintf(stderr, "floor: bad probe %s\n", argv[i]);
			return 2;
		}
		*last = 0;
		uint64_t off = strtoull(last + 1, NULL, 0);

		struct perf_event_attr pa;
		memset(&pa, 0, sizeof(pa));
		pa.size = sizeof(pa);
		pa.type = (uint32_t)type;
		pa.config = ret ? 1ull << ret_bit : 0;
		pa.uprobe_path = (uint64_t)(uintptr_t)spec;
		pa.probe_offset = off;
		int fd = (int)syscall(__NR_perf_event_open, &pa, pid, -1, -1, PERF_FLAG_FD_CLOEXEC);
		if (fd < 0) {
			fprintf(stderr, "floor: perf_event_open %s: %s\n", argv[i], strerror(errno));
			return 1;
		}
		if (ioctl(fd, PERF_EVENT_IOC_SET_BPF, prog) != 0 ||
		    ioctl(fd, PERF_EVENT_IOC_ENABLE, 0) != 0) {
			fprintf(stderr, "floor: attach %s: %s\n", argv[i], strerror(errno));
			return 1;
		}
	}
	printf("Attaching %d probes...\n", argc - 2);
	fflush(stdout);
	for (;;)
		pause();
}
