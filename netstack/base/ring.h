// A double-ended queue on one growable ring buffer: push/pop at both ends
// and indexing are O(1), and once the ring has grown to its working size
// nothing allocates again (std::deque allocates and frees a block every
// few dozen elements, which would put the heap on TCP's per-segment path).
// The capacity doubles when full and never shrinks until shrink_to_fit().
#ifndef NETSTACK_BASE_RING_H_
#define NETSTACK_BASE_RING_H_

#include <cstddef>
#include <memory>
#include <utility>

#include "netstack/base/dcheck.h"

namespace netstack {

template <typename T>
class Ring {
 public:
  Ring() = default;
  Ring(const Ring&) = delete;
  Ring& operator=(const Ring&) = delete;
  Ring(Ring&& o) noexcept { *this = std::move(o); }
  Ring& operator=(Ring&& o) noexcept {
    clear();
    buf_ = std::move(o.buf_);
    cap_ = std::exchange(o.cap_, 0);
    head_ = std::exchange(o.head_, 0);
    size_ = std::exchange(o.size_, 0);
    return *this;
  }
  ~Ring() { clear(); }

  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  size_t capacity() const { return cap_; }

  T& operator[](size_t i) {
    NETSTACK_DCHECK(i < size_);
    return *Slot(i);
  }
  const T& operator[](size_t i) const {
    NETSTACK_DCHECK(i < size_);
    return *Slot(i);
  }
  T& front() { return (*this)[0]; }
  const T& front() const { return (*this)[0]; }
  T& back() { return (*this)[size_ - 1]; }
  const T& back() const { return (*this)[size_ - 1]; }

  void push_back(T v) {
    Reserve(size_ + 1);
    new (Slot(size_)) T(std::move(v));
    ++size_;
  }
  void pop_front() {
    NETSTACK_DCHECK(size_ > 0);
    Slot(0)->~T();
    head_ = (head_ + 1) & (cap_ - 1);
    --size_;
  }
  void pop_back() {
    NETSTACK_DCHECK(size_ > 0);
    Slot(size_ - 1)->~T();
    --size_;
  }
  // Inserts before index i (O(size - i)).
  void insert(size_t i, T v) {
    NETSTACK_DCHECK(i <= size_);
    push_back(std::move(v));
    for (size_t k = size_ - 1; k > i; --k) std::swap(*Slot(k), *Slot(k - 1));
  }
  void clear() {
    while (size_ > 0) pop_back();
    head_ = 0;
  }
  // Frees the storage if empty (an idle connection's queues).
  void shrink_to_fit() {
    if (size_ == 0) {
      buf_.reset();
      cap_ = 0;
      head_ = 0;
    }
  }

 private:
  struct alignas(T) Storage {
    unsigned char bytes[sizeof(T)];
  };
  T* Slot(size_t i) const {
    return reinterpret_cast<T*>(buf_[(head_ + i) & (cap_ - 1)].bytes);
  }
  void Reserve(size_t n) {
    if (n <= cap_) return;
    size_t cap = cap_ == 0 ? 8 : cap_ * 2;
    while (cap < n) cap *= 2;
    std::unique_ptr<Storage[]> buf(new Storage[cap]);
    for (size_t i = 0; i < size_; ++i) {
      new (buf[i].bytes) T(std::move(*Slot(i)));
      Slot(i)->~T();
    }
    buf_ = std::move(buf);
    cap_ = cap;
    head_ = 0;
  }

  std::unique_ptr<Storage[]> buf_;
  size_t cap_ = 0;  // a power of two (or 0)
  size_t head_ = 0;
  size_t size_ = 0;
};

}  // namespace netstack

#endif  // NETSTACK_BASE_RING_H_
