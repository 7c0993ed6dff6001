/* Fuzz target: arbitrary bytes as the rendezvous root's answer to a rank
 * (src/bootstrap/bootstrap.c: the reply's header; a rank of one is sent no peer's address). A
 * fake root on loopback reads the rank's hello and sends the input back. One rank only, so weft
 * never connects to an address taken from the input. Every outcome must be a weft result, a reply
 * without the magic is never taken; never a crash. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "bootstrap.h"
#include "outcome.h"

typedef struct {
  int listen_fd;
  const uint8_t *data;
  size_t size;
} root_t;

static void *fake_root(void *arg) {
  root_t *r = arg;
  int fd = accept(r->listen_fd, NULL, NULL);
  if (fd < 0) return NULL;
  char hello[56]; /* root_hello_t: read whole, so that the close sends no reset */
  size_t got = 0;
  while (got < sizeof hello) {
    ssize_t n = recv(fd, hello + got, sizeof hello - got, 0);
    if (n <= 0) break;
    got += (size_t)n;
  }
  if (r->size) send(fd, r->data, r->size, MSG_NOSIGNAL);
  close(fd);
  return NULL;
}

/* accept: the reply was taken, with the communicator magic it carried; refuse: init failed
 * with the code named. */
void fuzz_outcome(const uint8_t *data, size_t size, char *out, size_t len) {
  snprintf(out, len, "skip");
  if (size > 4096) return;
  setenv("WEFT_SOCKET_IFADDR", "127.0.0.1", 1);
  root_t r = {.data = data, .size = size};
  weft_sockaddr_t a;
  weft_sockaddr_parse("127.0.0.1", &a);
  socklen_t alen = sizeof a.u;
  r.listen_fd = socket(AF_INET, SOCK_STREAM, 0);
  if (r.listen_fd < 0 || bind(r.listen_fd, &a.u.sa, a.len) != 0 || listen(r.listen_fd, 4) != 0 ||
      getsockname(r.listen_fd, &a.u.sa, &alen) != 0) {
    if (r.listen_fd >= 0) close(r.listen_fd);
    return;
  }
  pthread_t t;
  pthread_create(&t, NULL, fake_root, &r);
  /* The magic of the seed corpus, so mutations start from a valid reply. */
  weft_id_body_t id = {.magic = 0x1122334455667788ull, .version = WEFT_WIRE_VERSION, .root = a};
  weft_bootstrap_t *b = NULL;
  weft_result_t rc = weft_bootstrap_init(&id, 0, 1, 2000, NULL, &b);
  uint64_t magic = 0;
  memcpy(&magic, data, size < sizeof magic ? size : sizeof magic);
  if (rc == WEFT_SUCCESS && magic != id.magic) {
    fprintf(stderr, "fuzz_rendezvous: a reply with a wrong magic was taken\n");
    abort();
  }
  if (rc == WEFT_SUCCESS) {
    snprintf(out, len, "accept magic %#llx", (unsigned long long)b->magic);
    weft_bootstrap_free(b);
  } else if (rc < 0 || rc > WEFT_ERR_IN_PROGRESS) {
    abort();
  } else {
    snprintf(out, len, "refuse %s", fuzz_result_name(rc));
  }
  pthread_join(t, NULL);
  close(r.listen_fd);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char out[128];
  fuzz_outcome(data, size, out, sizeof out);
  return 0;
}
