#include "rpc/event_pump.h"

namespace millipede::rpc {

void EventPump::Post(std::function<void()> fn) {
  std::lock_guard<std::mutex> lock(mu_);
  if (closed_) return;
  queue_.push_back(std::move(fn));
  if (wake_.get() != nullptr && wake_->isWaiting()) wake_->fulfill();
}

void EventPump::Close() {
  std::deque<std::function<void()>> left;
  {
    std::lock_guard<std::mutex> lock(mu_);
    closed_ = true;
    left.swap(queue_);
  }
  // Run what was posted before the close (releasing capabilities among it) here, on the loop
  // thread, with no lock held: a function may post, which is dropped now.
  for (auto& fn : left) fn();
}

kj::Promise<void> EventPump::Run() {
  std::deque<std::function<void()>> ready;
  {
    std::lock_guard<std::mutex> lock(mu_);
    ready.swap(queue_);
    if (ready.empty()) {
      auto paf = kj::newPromiseAndCrossThreadFulfiller<void>();
      wake_ = kj::mv(paf.fulfiller);
      return paf.promise.then([this] { return Run(); });
    }
  }
  for (auto& fn : ready) fn();
  // Let the loop send what the functions started before looking again.
  return kj::evalLater([this] { return Run(); });
}

}  // namespace millipede::rpc
