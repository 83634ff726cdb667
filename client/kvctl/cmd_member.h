/* kvctl member add|remove|update|promote and move-leader (cmd_member.c). */
#ifndef KVCTL_CMD_MEMBER_H
#define KVCTL_CMD_MEMBER_H

#include <stdbool.h>
#include <stddef.h>

struct kvctl;

/* sub: "add", "remove", "update" or "promote"; args: the words after it. peer_urls: the
 * --peer-urls value (may be NULL). Returns the exit status. */
int kvctl_member_change(struct kvctl *k, const char *sub, size_t nargs, char **args,
                        const char *peer_urls, bool learner);
/* `kvctl move-leader <transferee-member-id>` (argv[0] = "move-leader"). */
int kvctl_cmd_move_leader(struct kvctl *k, int argc, char **argv);

#endif
