/* kvctl auth enable|disable, user ..., role ... (etcdctl 3.4's auth_command.go,
 * user_command.go, role_command.go and the simple printer's texts). Simple output only.
 * Passwords: --new-user-password, NAME:PASSWORD, or (--interactive=false) a line on stdin;
 * kvctl never prompts on a terminal. */
#include "kvctl.h"

#include "rpc.pb-c.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define A(m) "/etcdserverpb.Auth/" m

static int call(struct kvctl *k, const char *m, const ProtobufCMessage *req,
                const ProtobufCMessageDescriptor *rd, ProtobufCMessage **resp)
{
    *resp = NULL;
    return kvctl_call(k, m, req, rd, resp, k->command_timeout_ms, 0, KVCTL_EXIT_ERROR, NULL);
}

static int done(ProtobufCMessage *r, int rc)
{
    if (r)
        protobuf_c_message_free_unpacked(r, NULL);
    return rc;
}

static int need_args(size_t have, size_t want, const char *what)
{
    if (have == want)
        return 0;
    return kvctl_fail(KVCTL_EXIT_BAD_ARGS, "%s command requires %s as its argument", what,
                      want == 1 ? "1 argument" : "2 arguments");
}

/* ---- auth ---- */

static int auth_enable(struct kvctl *k)
{
    ProtobufCMessage *r = NULL;
    kvc_error err = {0};
    int rc = 0;
    kvc_client *c = kvctl_client(k, &rc);
    if (!c)
        return rc;
    for (int tries = 0; tries < 3; tries++) {
        Etcdserverpb__AuthEnableRequest req = ETCDSERVERPB__AUTH_ENABLE_REQUEST__INIT;
        if (kvctl_rpc(c, A("AuthEnable"), &req.base,
                      &etcdserverpb__auth_enable_response__descriptor, &r, k->command_timeout_ms, 0,
                      &err) == 0) {
            printf("Authentication Enabled\n");
            return done(r, 0);
        }
        if (strcmp(err.message, "etcdserver: root user does not have root role") != 0)
            break;
        /* etcdctl creates the root role and grants it to root, then retries */
        Etcdserverpb__AuthRoleAddRequest ra = ETCDSERVERPB__AUTH_ROLE_ADD_REQUEST__INIT;
        ra.name = "root";
        if (kvctl_rpc(c, A("RoleAdd"), &ra.base, &etcdserverpb__auth_role_add_response__descriptor,
                      &r, k->command_timeout_ms, 0, &err) < 0)
            break;
        done(r, 0);
        Etcdserverpb__AuthUserGrantRoleRequest g = ETCDSERVERPB__AUTH_USER_GRANT_ROLE_REQUEST__INIT;
        g.user = "root";
        g.role = "root";
        if (kvctl_rpc(c, A("UserGrantRole"), &g.base,
                      &etcdserverpb__auth_user_grant_role_response__descriptor, &r,
                      k->command_timeout_ms, 0, &err) < 0)
            break;
        done(r, 0);
    }
    char m[512];
    return kvctl_fail(KVCTL_EXIT_ERROR, "%s", kvctl_err_text(&err, m, sizeof m));
}

int kvctl_cmd_auth(struct kvctl *k, int argc, char **argv)
{
    char **pos = calloc((size_t)argc + 1, sizeof(char *));
    size_t np = 0;
    if (!pos)
        return kvctl_fail(KVCTL_EXIT_ERROR, "out of memory");
    int rc = kvctl_parse_cmd(k, argc, argv, NULL, pos, &np);
    if (rc)
        goto out;
    if (np != 2 || (strcmp(pos[1], "enable") != 0 && strcmp(pos[1], "disable") != 0)) {
        rc = kvctl_fail(KVCTL_EXIT_BAD_ARGS, "usage: kvctl auth enable|disable");
        goto out;
    }
    if (strcmp(pos[1], "enable") == 0) {
        rc = auth_enable(k);
    } else {
        Etcdserverpb__AuthDisableRequest req = ETCDSERVERPB__AUTH_DISABLE_REQUEST__INIT;
        ProtobufCMessage *r;
        rc = call(k, A("AuthDisable"), &req.base, &etcdserverpb__auth_disable_response__descriptor,
                  &r);
        if (!rc)
            printf("Authentication Disabled\n");
        done(r, 0);
    }
out:
    free(pos);
    return rc;
}

/* ---- user ---- */

/* The password: --new-user-password, "name:password", else one line of stdin. */
static int read_password(const char *flag, char *name_pw, char *out, size_t cap)
{
    char *colon = strchr(name_pw, ':');
    if (flag && *flag) {
        snprintf(out, cap, "%s", flag);
        return 0;
    }
    if (colon) {
        *colon = 0;
        snprintf(out, cap, "%s", colon + 1);
        return 0;
    }
    if (!fgets(out, (int)cap, stdin))
        return kvctl_fail(KVCTL_EXIT_ERROR, "failed to read password from stdin");
    out[strcspn(out, "\r\n")] = 0;
    return 0;
}

static int print_names(char **v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        printf("%s\n", v[i]);
    return 0;
}

int kvctl_cmd_user(struct kvctl *k, int argc, char **argv)
{
    const char *newpw = NULL;
    bool nopw = false, interactive = true, detail = false;
    struct kvctl_flag fl[] = {
        {"new-user-password", 0, KVCTL_FLAG_STRING, &newpw, false},
        {"no-password", 0, KVCTL_FLAG_BOOL, &nopw, false},
        {"interactive", 0, KVCTL_FLAG_BOOL, &interactive, false},
        {"detail", 0, KVCTL_FLAG_BOOL, &detail, false},
        {NULL, 0, KVCTL_FLAG_BOOL, NULL, false},
    };
    char **pos = calloc((size_t)argc + 1, sizeof(char *));
    size_t np = 0;
    if (!pos)
        return kvctl_fail(KVCTL_EXIT_ERROR, "out of memory");
    int rc = kvctl_parse_cmd(k, argc, argv, fl, pos, &np);
    if (rc)
        goto out;
    static const char *const subs[] = {"add",    "delete",     "get",        "list",
                                       "passwd", "grant-role", "revoke-role"};
    int sub = np >= 2 ? kvctl_match(pos[1], subs, 7) : -1;
    size_t na = np >= 2 ? np - 2 : 0;
    char **a = pos + 2;
    ProtobufCMessage *r = NULL;
    char pw[1024];
    switch (sub) {
    case 0: { /* add */
        if ((rc = need_args(na, 1, "user add")))
            break;
        Etcdserverpb__AuthUserAddRequest req = ETCDSERVERPB__AUTH_USER_ADD_REQUEST__INIT;
        Authpb__UserAddOptions opt = AUTHPB__USER_ADD_OPTIONS__INIT;
        pw[0] = 0;
        if (!nopw && (rc = read_password(newpw, a[0], pw, sizeof pw)))
            break;
        opt.no_password = nopw;
        req.name = a[0];
        req.password = pw;
        req.options = &opt;
        rc =
            call(k, A("UserAdd"), &req.base, &etcdserverpb__auth_user_add_response__descriptor, &r);
        if (!rc)
            printf("User %s created\n", a[0]);
        break;
    }
    case 1: { /* delete */
        if ((rc = need_args(na, 1, "user delete")))
            break;
        Etcdserverpb__AuthUserDeleteRequest req = ETCDSERVERPB__AUTH_USER_DELETE_REQUEST__INIT;
        req.name = a[0];
        rc = call(k, A("UserDelete"), &req.base,
                  &etcdserverpb__auth_user_delete_response__descriptor, &r);
        if (!rc)
            printf("User %s deleted\n", a[0]);
        break;
    }
    case 2: { /* get */
        if ((rc = need_args(na, 1, "user get")))
            break;
        Etcdserverpb__AuthUserGetRequest req = ETCDSERVERPB__AUTH_USER_GET_REQUEST__INIT;
        req.name = a[0];
        rc =
            call(k, A("UserGet"), &req.base, &etcdserverpb__auth_user_get_response__descriptor, &r);
        if (!rc) {
            Etcdserverpb__AuthUserGetResponse *g = (Etcdserverpb__AuthUserGetResponse *)r;
            printf("User: %s\nRoles:", a[0]);
            for (size_t i = 0; i < g->n_roles; i++)
                printf(" %s", g->roles[i]);
            printf("\n");
        }
        break;
    }
    case 3: { /* list */
        Etcdserverpb__AuthUserListRequest req = ETCDSERVERPB__AUTH_USER_LIST_REQUEST__INIT;
        rc = call(k, A("UserList"), &req.base, &etcdserverpb__auth_user_list_response__descriptor,
                  &r);
        if (!rc)
            print_names(((Etcdserverpb__AuthUserListResponse *)r)->users,
                        ((Etcdserverpb__AuthUserListResponse *)r)->n_users);
        break;
    }
    case 4: { /* passwd */
        if ((rc = need_args(na, 1, "user passwd")))
            break;
        if ((rc = read_password(NULL, a[0], pw, sizeof pw)))
            break;
        Etcdserverpb__AuthUserChangePasswordRequest req =
            ETCDSERVERPB__AUTH_USER_CHANGE_PASSWORD_REQUEST__INIT;
        req.name = a[0];
        req.password = pw;
        rc = call(k, A("UserChangePassword"), &req.base,
                  &etcdserverpb__auth_user_change_password_response__descriptor, &r);
        if (!rc)
            printf("Password updated\n");
        break;
    }
    case 5:   /* grant-role */
    case 6: { /* revoke-role */
        if ((rc = need_args(na, 2, sub == 5 ? "user grant-role" : "user revoke-role")))
            break;
        if (sub == 5) {
            Etcdserverpb__AuthUserGrantRoleRequest req =
                ETCDSERVERPB__AUTH_USER_GRANT_ROLE_REQUEST__INIT;
            req.user = a[0];
            req.role = a[1];
            rc = call(k, A("UserGrantRole"), &req.base,
                      &etcdserverpb__auth_user_grant_role_response__descriptor, &r);
            if (!rc)
                printf("Role %s is granted to user %s\n", a[1], a[0]);
        } else {
            Etcdserverpb__AuthUserRevokeRoleRequest req =
                ETCDSERVERPB__AUTH_USER_REVOKE_ROLE_REQUEST__INIT;
            req.name = a[0];
            req.role = a[1];
            rc = call(k, A("UserRevokeRole"), &req.base,
                      &etcdserverpb__auth_user_revoke_role_response__descriptor, &r);
            if (!rc)
                printf("Role %s is revoked from user %s\n", a[1], a[0]);
        }
        break;
    }
    default:
        rc = kvctl_fail(KVCTL_EXIT_BAD_ARGS,
                        "usage: kvctl user add|delete|get|list|passwd|grant-role|revoke-role");
        break;
    }
    done(r, 0);
out:
    free(pos);
    return rc;
}

/* ---- role ---- */

/* clientv3.GetPrefixRangeEnd: the key with its last byte below 0xff incremented (and what
 * follows dropped); "\0" when every byte is 0xff. out gets len bytes. */
static size_t prefix_end(const char *key, char *out)
{
    size_t n = strlen(key);
    memcpy(out, key, n);
    for (size_t i = n; i > 0; i--)
        if ((unsigned char)out[i - 1] < 0xff) {
            out[i - 1]++;
            return i;
        }
    out[0] = 0;
    return 1;
}

static void print_perms(Etcdserverpb__AuthRoleGetResponse *g, int want_write)
{
    for (size_t i = 0; i < g->n_perm; i++) {
        Authpb__Permission *p = g->perm[i];
        int t = (int)p->permtype;
        if (!(t == 2 || t == want_write))
            continue;
        const char *key = (const char *)p->key.data;
        int kl = (int)p->key.len;
        if (p->range_end.len == 0) {
            printf("\t%.*s\n", kl, key ? key : "");
            continue;
        }
        if (p->range_end.len == 1 && p->range_end.data[0] == 0)
            printf("\t[%.*s, <open ended>", kl, key ? key : "");
        else
            printf("\t[%.*s, %.*s)", kl, key ? key : "", (int)p->range_end.len,
                   (const char *)p->range_end.data);
        char k0[1024], pe[1024];
        if (p->key.len < sizeof k0) {
            memcpy(k0, key ? key : "", p->key.len);
            k0[p->key.len] = 0;
            size_t pl = prefix_end(k0, pe);
            if (pl == p->range_end.len && memcmp(pe, p->range_end.data, pl) == 0)
                printf(" (prefix %s)", k0);
        }
        printf("\n");
    }
}

static int perm_type(const char *s, int *t)
{
    static const char *const names[] = {"READ", "WRITE", "READWRITE"};
    for (int i = 0; i < 3; i++)
        if (strcasecmp(s, names[i]) == 0) {
            *t = i;
            return 0;
        }
    return kvctl_fail(KVCTL_EXIT_BAD_ARGS, "invalid permission type: %s", s);
}

int kvctl_cmd_role(struct kvctl *k, int argc, char **argv)
{
    bool prefix = false, from_key = false;
    struct kvctl_flag fl[] = {
        {"prefix", 0, KVCTL_FLAG_BOOL, &prefix, false},
        {"from-key", 0, KVCTL_FLAG_BOOL, &from_key, false},
        {NULL, 0, KVCTL_FLAG_BOOL, NULL, false},
    };
    char **pos = calloc((size_t)argc + 1, sizeof(char *));
    size_t np = 0;
    if (!pos)
        return kvctl_fail(KVCTL_EXIT_ERROR, "out of memory");
    int rc = kvctl_parse_cmd(k, argc, argv, fl, pos, &np);
    if (rc)
        goto out;
    static const char *const subs[] = {"add",  "delete",           "get",
                                       "list", "grant-permission", "revoke-permission"};
    int sub = np >= 2 ? kvctl_match(pos[1], subs, 6) : -1;
    size_t na = np >= 2 ? np - 2 : 0;
    char **a = pos + 2;
    ProtobufCMessage *r = NULL;
    char end[1024];
    size_t elen = 0;
    switch (sub) {
    case 0: { /* add */
        if ((rc = need_args(na, 1, "role add")))
            break;
        Etcdserverpb__AuthRoleAddRequest req = ETCDSERVERPB__AUTH_ROLE_ADD_REQUEST__INIT;
        req.name = a[0];
        rc =
            call(k, A("RoleAdd"), &req.base, &etcdserverpb__auth_role_add_response__descriptor, &r);
        if (!rc)
            printf("Role %s created\n", a[0]);
        break;
    }
    case 1: { /* delete */
        if ((rc = need_args(na, 1, "role delete")))
            break;
        Etcdserverpb__AuthRoleDeleteRequest req = ETCDSERVERPB__AUTH_ROLE_DELETE_REQUEST__INIT;
        req.role = a[0];
        rc = call(k, A("RoleDelete"), &req.base,
                  &etcdserverpb__auth_role_delete_response__descriptor, &r);
        if (!rc)
            printf("Role %s deleted\n", a[0]);
        break;
    }
    case 2: { /* get */
        if ((rc = need_args(na, 1, "role get")))
            break;
        Etcdserverpb__AuthRoleGetRequest req = ETCDSERVERPB__AUTH_ROLE_GET_REQUEST__INIT;
        req.role = a[0];
        rc =
            call(k, A("RoleGet"), &req.base, &etcdserverpb__auth_role_get_response__descriptor, &r);
        if (!rc) {
            printf("Role %s\nKV Read:\n", a[0]);
            print_perms((Etcdserverpb__AuthRoleGetResponse *)r, 0);
            printf("KV Write:\n");
            print_perms((Etcdserverpb__AuthRoleGetResponse *)r, 1);
        }
        break;
    }
    case 3: { /* list */
        Etcdserverpb__AuthRoleListRequest req = ETCDSERVERPB__AUTH_ROLE_LIST_REQUEST__INIT;
        rc = call(k, A("RoleList"), &req.base, &etcdserverpb__auth_role_list_response__descriptor,
                  &r);
        if (!rc)
            print_names(((Etcdserverpb__AuthRoleListResponse *)r)->roles,
                        ((Etcdserverpb__AuthRoleListResponse *)r)->n_roles);
        break;
    }
    case 4:   /* grant-permission ROLE TYPE KEY [END] */
    case 5: { /* revoke-permission ROLE KEY [END] */
        size_t fixed = sub == 4 ? 3 : 2;
        if (na < fixed || na > fixed + 1) {
            rc = kvctl_fail(KVCTL_EXIT_BAD_ARGS,
                            "role %s command requires role name, %skey "
                            "[endkey] as its argument",
                            subs[sub], sub == 4 ? "permission type, " : "");
            break;
        }
        const char *key = a[fixed - 1];
        if (na == fixed + 1 && (prefix || from_key)) {
            rc = kvctl_fail(KVCTL_EXIT_BAD_ARGS, "--prefix and [endkey] cannot be set at the same "
                                                 "time");
            break;
        }
        if (prefix)
            elen = prefix_end(key, end);
        else if (from_key) {
            end[0] = 0;
            elen = 1;
        } else if (na == fixed + 1) {
            elen = strlen(a[fixed]);
            if (elen >= sizeof end)
                elen = sizeof end - 1;
            memcpy(end, a[fixed], elen);
        }
        if (sub == 4) {
            int t = 0;
            if ((rc = perm_type(a[1], &t)))
                break;
            Authpb__Permission p = AUTHPB__PERMISSION__INIT;
            p.permtype = (Authpb__Permission__Type)t;
            p.key.data = (uint8_t *)key;
            p.key.len = strlen(key);
            p.range_end.data = (uint8_t *)end;
            p.range_end.len = elen;
            Etcdserverpb__AuthRoleGrantPermissionRequest req =
                ETCDSERVERPB__AUTH_ROLE_GRANT_PERMISSION_REQUEST__INIT;
            req.name = a[0];
            req.perm = &p;
            rc = call(k, A("RoleGrantPermission"), &req.base,
                      &etcdserverpb__auth_role_grant_permission_response__descriptor, &r);
            if (!rc)
                printf("Role %s updated\n", a[0]);
        } else {
            Etcdserverpb__AuthRoleRevokePermissionRequest req =
                ETCDSERVERPB__AUTH_ROLE_REVOKE_PERMISSION_REQUEST__INIT;
            req.role = a[0];
            req.key.data = (uint8_t *)key;
            req.key.len = strlen(key);
            req.range_end.data = (uint8_t *)end;
            req.range_end.len = elen;
            rc = call(k, A("RoleRevokePermission"), &req.base,
                      &etcdserverpb__auth_role_revoke_permission_response__descriptor, &r);
            if (!rc) {
                if (elen == 0)
                    printf("Permission of key %s is revoked from role %s\n", key, a[0]);
                else
                    printf("Permission of range [%s, %.*s) is revoked from role %s\n", key,
                           (int)elen, end, a[0]);
            }
        }
        break;
    }
    default:
        rc = kvctl_fail(KVCTL_EXIT_BAD_ARGS, "usage: kvctl role add|delete|get|list|"
                                             "grant-permission|revoke-permission");
        break;
    }
    done(r, 0);
out:
    free(pos);
    return rc;
}
