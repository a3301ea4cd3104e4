#include "service/shm.h"

#include "service/protocol.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <linux/magic.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace uroce::service {

std::uint32_t ring_slots(std::uint32_t n) { return ring::pow2_at_least(n); }

std::size_t page_round(std::size_t bytes) {
  const auto page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
  return (bytes + page - 1) / page * page;
}

int make_memory_file(const char* name, std::size_t bytes, bool huge, Sealing sealing) {
  const int fd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING | (huge ? MFD_HUGETLB : 0u));
  if (fd < 0) return -1;
  const int seals = F_SEAL_SHRINK | F_SEAL_GROW | (sealing == Sealing::kFinal ? F_SEAL_SEAL : 0);
  if (ftruncate(fd, static_cast<off_t>(bytes)) != 0 || fcntl(fd, F_ADD_SEALS, seals) != 0) {
    const int e = errno;
    close(fd);
    errno = e;
    return -1;
  }
  return fd;
}

std::string check_memory_file(int fd, MemoryFileInfo& info) {
  struct stat st {};
  if (fstat(fd, &st) != 0) return "fstat: " + std::string(std::strerror(errno));
  struct statfs fs {};
  if (!S_ISREG(st.st_mode) || fstatfs(fd, &fs) != 0 ||
      (fs.f_type != TMPFS_MAGIC && fs.f_type != HUGETLBFS_MAGIC)) {
    return "not a memory file (memfd_create): a regular file on tmpfs or hugetlbfs is needed";
  }
  if ((fcntl(fd, F_GETFL) & O_ACCMODE) != O_RDWR) return "memory file not open read-write";
  const int seals = fcntl(fd, F_GET_SEALS);
  if (seals < 0) return "not a memory file (F_GET_SEALS: " + std::string(std::strerror(errno)) + ")";
  if ((seals & F_SEAL_SHRINK) == 0 || (seals & F_SEAL_GROW) == 0) {
    return "memory file not sealed against shrinking and growing";
  }
  if ((seals & F_SEAL_WRITE) != 0) return "memory file sealed against writing (F_SEAL_WRITE): uroced could not place data in it";
  info.write_sealed = (seals & F_SEAL_FUTURE_WRITE) != 0;
  info.dev = static_cast<std::uint64_t>(st.st_dev);
  info.ino = static_cast<std::uint64_t>(st.st_ino);
  info.bytes = static_cast<std::uint64_t>(st.st_size);
  info.huge = fs.f_type == HUGETLBFS_MAGIC;
  if (info.huge && (seals & F_SEAL_SEAL) != 0 && !info.write_sealed) {
    return "hugepage memory file sealed with F_SEAL_SEAL before uroced could seal it against hole punching: "
           "seal it with F_SEAL_SHRINK | F_SEAL_GROW only (make_memory_file does)";
  }
  return "";
}

std::string seal_against_writers(int fd) {
  if (fcntl(fd, F_ADD_SEALS, F_SEAL_FUTURE_WRITE) == 0) return "";
  return "sealing the memory file against hole punching (F_SEAL_FUTURE_WRITE): " + std::string(std::strerror(errno)) +
         " (was it sealed with F_SEAL_SEAL meanwhile?)";
}

void* map_shared(int fd, std::size_t bytes, std::size_t offset) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, static_cast<off_t>(offset));
  return p == MAP_FAILED ? nullptr : p;
}

int send_message(int sock, const void* buf, std::size_t len, const int* fds, int nfds) {
  iovec iov{const_cast<void*>(buf), len};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(kMaxFds * sizeof(int))] = {};
  if (nfds > kMaxFds) return E2BIG;
  if (nfds > 0) {
    msg.msg_control = control;
    msg.msg_controllen = CMSG_SPACE(static_cast<std::size_t>(nfds) * sizeof(int));
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(static_cast<std::size_t>(nfds) * sizeof(int));
    std::memcpy(CMSG_DATA(c), fds, static_cast<std::size_t>(nfds) * sizeof(int));
  }
  for (;;) {
    const ssize_t n = sendmsg(sock, &msg, MSG_NOSIGNAL);
    if (n >= 0) return static_cast<std::size_t>(n) == len ? 0 : EMSGSIZE;
    if (errno != EINTR) return errno;
  }
}

long recv_message(int sock, void* buf, std::size_t len, int* fds, int max_fds, int& nfds) {
  nfds = 0;
  iovec iov{buf, len};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(kMaxFds * sizeof(int))] = {};
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  ssize_t n;
  do {
    n = recvmsg(sock, &msg, MSG_CMSG_CLOEXEC);
  } while (n < 0 && errno == EINTR);
  if (n < 0) return -errno;
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    const std::size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (std::size_t i = 0; i < count; ++i) {
      int fd;
      std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof fd);
      if (nfds < max_fds) fds[nfds++] = fd;
      else close(fd);
    }
  }
  if ((msg.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) != 0) {
    for (int i = 0; i < nfds; ++i) close(fds[i]);
    nfds = 0;
    return -EMSGSIZE;
  }
  return n;
}

}  // namespace uroce::service
