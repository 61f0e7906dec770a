// Hands work from other threads (the scheduler's) to a KJ event loop: Post() from any thread,
// Run() on the loop's thread executes the posted functions there, in order.
#pragma once

#include <kj/async.h>

#include <deque>
#include <functional>
#include <mutex>

namespace millipede::rpc {

class EventPump {
 public:
  // Queues `fn` to run on the loop thread. After Close() it is dropped (never run).
  void Post(std::function<void()> fn);
  // On the loop thread: runs posted functions as they come; never resolves (drop to stop).
  kj::Promise<void> Run();
  // On the loop thread: runs what is still queued, then drops everything posted from now on.
  void Close();

 private:
  std::mutex mu_;
  std::deque<std::function<void()>> queue_;
  kj::Own<kj::CrossThreadPromiseFulfiller<void>> wake_;  // set while Run() waits
  bool closed_ = false;
};

}  // namespace millipede::rpc
