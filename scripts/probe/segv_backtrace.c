// LD_PRELOAD helper for machines without gdb: on SIGSEGV/SIGABRT print the native stack (with the
// object each frame lies in) to stderr, then die of the same signal. Diagnosis only.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <execinfo.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static void on_signal(int sig, siginfo_t* info, void* ctx) {
  (void)ctx;
  void* frames[64];
  int n = backtrace(frames, 64);
  fprintf(stderr, "echo-probe: signal %d at address %p, %d frames\n", sig, info->si_addr, n);
  for (int i = 0; i < n; ++i) {
    Dl_info d;
    if (dladdr(frames[i], &d) && d.dli_fname)
      fprintf(stderr, "  #%d %p %s+0x%lx (%s)\n", i, frames[i], d.dli_fname,
              (unsigned long)((char*)frames[i] - (char*)d.dli_fbase), d.dli_sname ? d.dli_sname : "?");
    else
      fprintf(stderr, "  #%d %p ?\n", i, frames[i]);
  }
  signal(sig, SIG_DFL);
  raise(sig);
}

__attribute__((constructor)) static void install(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = on_signal;
  sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
  sigaction(SIGSEGV, &sa, 0);
  sigaction(SIGABRT, &sa, 0);
}
