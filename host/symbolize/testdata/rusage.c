/* rusage runs a command and prints its CPU time (user+system, in
 * microseconds) and peak resident set (ru_maxrss, KiB) to stderr as
 * "rusage CPU_US MAXRSS_KIB". The benchmarks measure child processes
 * through it: a child that a large process (the Go test) spawns directly
 * inherits that process's peak RSS across exec. */
#include <stdio.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

int main(int argc, char **argv) {
	if (argc < 2)
		return 2;
	pid_t pid = fork();
	if (pid < 0)
		return 2;
	if (pid == 0) {
		execvp(argv[1], argv + 1);
		_exit(127);
	}
	int status;
	struct rusage ru;
	if (wait4(pid, &status, 0, &ru) < 0)
		return 2;
	long long us = (long long)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000000 + ru.ru_utime.tv_usec + ru.ru_stime.tv_usec;
	fprintf(stderr, "rusage %lld %ld\n", us, ru.ru_maxrss);
	return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}
