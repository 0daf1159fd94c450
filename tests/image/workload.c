/* The workload of the image test: a static program that needs nothing from the image.
 *
 *   workload orphans       forks a child that forks a grandchild and exits at once, so the
 *                          grandchild is re-parented to PID 1; the grandchild prints its pid
 *                          and its parent's, lives two seconds more and exits, and PID 1 must
 *                          reap it. The main process sleeps until signalled.
 *   workload stubborn      ignores SIGTERM and sleeps: only SIGKILL (after kill-delay) ends it.
 *   workload sleep         sleeps until signalled.
 *   workload echo WORDS    prints its words on one line.
 *   workload ls DIR        prints the names in DIR, one a line, sorted.
 *   workload exit N        exits with status N.
 *   workload http PORT     serves HTTP on 127.0.0.1:PORT: 200 and "ok" to every request.
 */
#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

static int by_name(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static void sleep_forever(void) {
    for (;;) pause();
}

static int serve_http(int port) {
    int listener = socket(AF_INET, SOCK_STREAM, 0);
    int on = 1;
    setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons(port)};
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(listener, (struct sockaddr *)&addr, sizeof addr) || listen(listener, 16)) {
        perror("http");
        return 1;
    }
    printf("serving http on 127.0.0.1:%d\n", port);
    static const char reply[] =
        "HTTP/1.1 200 OK\r\nContent-Length: 3\r\nConnection: close\r\n\r\nok\n";
    for (;;) {
        int conn = accept(listener, NULL, NULL);
        if (conn < 0) continue;
        /* Read the request head (bounded), then answer and close. */
        char head[4096];
        size_t len = 0;
        while (len < sizeof head - 1) {
            ssize_t n = read(conn, head + len, sizeof head - 1 - len);
            if (n <= 0) break;
            len += n;
            head[len] = 0;
            if (strstr(head, "\r\n\r\n")) break;
        }
        ssize_t ignored = write(conn, reply, sizeof reply - 1);
        (void)ignored;
        close(conn);
    }
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc < 2) return 2;
    const char *mode = argv[1];
    if (strcmp(mode, "orphans") == 0) {
        pid_t child = fork();
        if (child == 0) {
            pid_t grandchild = fork();
            if (grandchild == 0) {
                sleep(1); /* by now its parent has exited: PID 1 is its parent */
                printf("orphan %d has parent %d\n", (int)getpid(), (int)getppid());
                sleep(2);
                _exit(0);
            }
            _exit(0);
        }
        waitpid(child, NULL, 0);
        printf("orphans started\n");
        sleep_forever();
    } else if (strcmp(mode, "stubborn") == 0) {
        signal(SIGTERM, SIG_IGN);
        printf("stubborn ignores SIGTERM\n");
        sleep_forever();
    } else if (strcmp(mode, "sleep") == 0) {
        sleep_forever();
    } else if (strcmp(mode, "echo") == 0) {
        for (int i = 2; i < argc; i++) printf(i > 2 ? " %s" : "%s", argv[i]);
        printf("\n");
    } else if (strcmp(mode, "ls") == 0 && argc == 3) {
        DIR *dir = opendir(argv[2]);
        if (!dir) { perror(argv[2]); return 1; }
        char *names[256];
        int n = 0;
        struct dirent *entry;
        while ((entry = readdir(dir)) && n < 256) {
            if (strcmp(entry->d_name, ".") && strcmp(entry->d_name, ".."))
                names[n++] = strdup(entry->d_name);
        }
        closedir(dir);
        qsort(names, n, sizeof names[0], by_name);
        for (int i = 0; i < n; i++) printf("%s\n", names[i]);
    } else if (strcmp(mode, "http") == 0 && argc == 3) {
        return serve_http(atoi(argv[2]));
    } else if (strcmp(mode, "exit") == 0 && argc == 3) {
        return atoi(argv[2]);
    } else {
        return 2;
    }
    return 0;
}
