// storage/thread_annotations.h — lock rules the compiler checks: clang's thread-safety attributes
// and a mutex that carries them.
//
// A member written `T x_ OCLVM_GUARDED_BY(mutex_);` may be read or written only while `mutex_`
// is held; a function declared `OCLVM_REQUIRES(mutex_)` may be called only with it held, and one
// declared `OCLVM_EXCLUDES(mutex_)` only without. Any class declared `OCLVM_CAPABILITY` can stand
// where `mutex_` does, a mutex or not; `OCLVM_ASSERT_CAPABILITY` marks a function that checks at
// run time that one is held. Under clang, `-Wthread-safety` (on in every clang
// build of the project, an error there since warnings are) checks each of these at compile time;
// under other compilers the macros expand to nothing and the rules are documentation.
//
// std::mutex carries no attributes in libstdc++, so the analysis cannot see it taken: locked
// state uses oclvm::Mutex and the scoped MutexLock below instead. A condition variable waits on
// MutexLock::native(); the analysis does not model the wait (the lock is held again when it
// returns, which is all the code after it relies on), so waits are written as explicit loops
// over the guarded condition, which it does check.
//
// Thread-safety: Mutex is a mutex; a MutexLock belongs to the thread that made it.
#pragma once

#include <mutex>

#if defined(__clang__)
#define OCLVM_THREAD_ATTRIBUTE(x) __attribute__((x))
#else
#define OCLVM_THREAD_ATTRIBUTE(x)
#endif

#define OCLVM_CAPABILITY(name) OCLVM_THREAD_ATTRIBUTE(capability(name))
#define OCLVM_SCOPED_CAPABILITY OCLVM_THREAD_ATTRIBUTE(scoped_lockable)
#define OCLVM_GUARDED_BY(mutex) OCLVM_THREAD_ATTRIBUTE(guarded_by(mutex))
#define OCLVM_PT_GUARDED_BY(mutex) OCLVM_THREAD_ATTRIBUTE(pt_guarded_by(mutex))
#define OCLVM_REQUIRES(...) OCLVM_THREAD_ATTRIBUTE(requires_capability(__VA_ARGS__))
#define OCLVM_EXCLUDES(...) OCLVM_THREAD_ATTRIBUTE(locks_excluded(__VA_ARGS__))
#define OCLVM_ACQUIRE(...) OCLVM_THREAD_ATTRIBUTE(acquire_capability(__VA_ARGS__))
#define OCLVM_RELEASE(...) OCLVM_THREAD_ATTRIBUTE(release_capability(__VA_ARGS__))
#define OCLVM_TRY_ACQUIRE(...) OCLVM_THREAD_ATTRIBUTE(try_acquire_capability(__VA_ARGS__))
#define OCLVM_RETURN_CAPABILITY(x) OCLVM_THREAD_ATTRIBUTE(lock_returned(x))
// A function that checks, at run time, that a capability is held, and tells the analysis so.
#define OCLVM_ASSERT_CAPABILITY(x) OCLVM_THREAD_ATTRIBUTE(assert_capability(x))
// For the rare function whose locking the analysis cannot follow; say why beside it.
#define OCLVM_NO_THREAD_SAFETY_ANALYSIS OCLVM_THREAD_ATTRIBUTE(no_thread_safety_analysis)

namespace oclvm {

// A std::mutex the analysis knows as a capability. Meets BasicLockable and Lockable.
class OCLVM_CAPABILITY("mutex") Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void lock() OCLVM_ACQUIRE() { mutex_.lock(); }
  void unlock() OCLVM_RELEASE() { mutex_.unlock(); }
  bool try_lock() OCLVM_TRY_ACQUIRE(true) { return mutex_.try_lock(); }

  // The underlying mutex, for std::unique_lock (MutexLock uses it).
  std::mutex& native() { return mutex_; }

 private:
  std::mutex mutex_;
};

// Holds a Mutex for its scope, as std::unique_lock does (and owns one, for condition variables).
class OCLVM_SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex& mutex) OCLVM_ACQUIRE(mutex) : lock_(mutex.native()) {}
  ~MutexLock() OCLVM_RELEASE() = default;
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

  // Gives the mutex up before the scope ends (once).
  void unlock() OCLVM_RELEASE() { lock_.unlock(); }

  // For std::condition_variable::wait: a wait releases and retakes the mutex inside.
  std::unique_lock<std::mutex>& native() { return lock_; }

 private:
  std::unique_lock<std::mutex> lock_;
};

}  // namespace oclvm
