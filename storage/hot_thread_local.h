// storage/hot_thread_local.h — the thread-local storage model of the few thread-locals read on
// every allocation, release and operator.
//
// Code in a shared library reaches its thread-locals through the general-dynamic model by
// default: each read is a call to __tls_get_addr (about a dozen instructions, and the compiler
// repeats it after any call it cannot see into). The torch module, which Python loads with
// dlopen, made 22 such calls per `empty` + `del` round trip. OCLVM_HOT_TLS asks for the
// initial-exec model instead: one load relative to the thread pointer.
//
// The price: a library loaded with dlopen gets initial-exec thread-locals from glibc's static TLS
// surplus (a part reserved per namespace, plus glibc.rtld.optional_static_tls, 512 bytes by
// default), and it takes the module's whole thread-local block there, not only the marked
// variables. So every thread-local of a module that uses the macro must stay small: a word, or a
// pointer to memory made on the thread's first use. design/vm.md ("Thread-locals on the hot
// path") says which are marked and what the block weighs. Were the surplus used up by other
// libraries, loading the module would fail with "cannot allocate memory in static TLS block";
// raising the tunable is the remedy.
//
// Thread-safety: a marked variable is a thread_local like any other.
#pragma once

#if defined(__GNUC__) || defined(__clang__)
#define OCLVM_HOT_TLS __attribute__((tls_model("initial-exec")))
#else
#define OCLVM_HOT_TLS
#endif
