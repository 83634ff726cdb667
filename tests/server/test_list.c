/* test_list: the intrusive doubly-linked list (server/common/list.h). */
#include <criterion/criterion.h>

#include <stddef.h>

#include "common/list.h"

typedef struct item {
    int v;
    kv_list link;
    kv_list other; /* a second link: on a second list at the same time */
} item;

/* The values of the list at head, in order, into out (at most cap); returns how many. Also
 * checks that the backward walk gives the same elements reversed. */
static size_t values(const kv_list *head, int *out, size_t cap)
{
    size_t n = 0;
    kv_list *e;
    kv_list_foreach(e, head) {
        cr_assert_lt(n, cap, "more elements than expected (a cycle?)");
        out[n++] = kv_list_data(e, item, link)->v;
    }
    size_t k = n;
    for (e = head->prev; e != head; e = e->prev) {
        cr_assert_gt(k, 0, "the backward walk is longer");
        cr_assert_eq(kv_list_data(e, item, link)->v, out[--k]);
    }
    cr_assert_eq(k, 0, "the backward walk is shorter");
    return n;
}

static void expect_values(const kv_list *head, const int *want, size_t n)
{
    int got[16];
    size_t k = values(head, got, 16);
    cr_assert_eq(k, n, "%zu elements, want %zu", k, n);
    for (size_t i = 0; i < n; i++)
        cr_expect_eq(got[i], want[i], "element %zu: %d, want %d", i, got[i], want[i]);
}

static void init_items(item *it, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        it[i].v = (int)i;
        kv_list_init(&it[i].link);
        kv_list_init(&it[i].other);
    }
}

Test(list, empty_head_and_unlinked_link)
{
    kv_list h;
    kv_list_init(&h);
    cr_assert(kv_list_empty(&h));
    cr_assert_null(kv_list_head(&h));
    kv_list *e;
    int n = 0;
    kv_list_foreach(e, &h)
        n++;
    cr_assert_eq(n, 0);
    item a;
    init_items(&a, 1);
    cr_assert(kv_list_empty(&a.link), "an initialised link is on no list");
    kv_list_remove(&a.link); /* on no list: harmless */
    cr_assert(kv_list_empty(&a.link));
}

Test(list, insert_tail_and_head_keep_order)
{
    kv_list h;
    kv_list_init(&h);
    item it[4];
    init_items(it, 4);
    kv_list_insert_tail(&h, &it[1].link);
    kv_list_insert_tail(&h, &it[2].link);
    kv_list_insert_head(&h, &it[0].link);
    kv_list_insert_tail(&h, &it[3].link);
    cr_assert(!kv_list_empty(&h));
    cr_assert(!kv_list_empty(&it[2].link), "a linked link is not empty");
    expect_values(&h, (int[]){0, 1, 2, 3}, 4);
    cr_assert_eq(kv_list_head(&h), &it[0].link);
    cr_assert_eq(kv_list_data(kv_list_head(&h), item, link), &it[0]);
    cr_assert_eq(kv_list_next(&h, &it[0].link), &it[1].link);
    cr_assert_eq(kv_list_next(&h, &it[2].link), &it[3].link);
    cr_assert_null(kv_list_next(&h, &it[3].link), "no element after the last");
    cr_assert_eq(kv_list_next(&h, &h), &it[0].link, "after the head: the first");
}

Test(list, remove_first_middle_last_and_only)
{
    kv_list h;
    kv_list_init(&h);
    item it[4];
    init_items(it, 4);
    for (int i = 0; i < 4; i++)
        kv_list_insert_tail(&h, &it[i].link);
    kv_list_remove(&it[2].link);
    expect_values(&h, (int[]){0, 1, 3}, 3);
    cr_assert(kv_list_empty(&it[2].link), "removed: re-initialised");
    kv_list_remove(&it[0].link);
    expect_values(&h, (int[]){1, 3}, 2);
    kv_list_remove(&it[3].link);
    expect_values(&h, (int[]){1}, 1);
    kv_list_remove(&it[1].link);
    cr_assert(kv_list_empty(&h));
    cr_assert_null(kv_list_head(&h));
    /* re-inserted after removal */
    kv_list_insert_head(&h, &it[2].link);
    expect_values(&h, (int[]){2}, 1);
}

Test(list, double_remove_is_harmless)
{
    kv_list h;
    kv_list_init(&h);
    item it[3];
    init_items(it, 3);
    for (int i = 0; i < 3; i++)
        kv_list_insert_tail(&h, &it[i].link);
    kv_list_remove(&it[1].link);
    kv_list_remove(&it[1].link);
    kv_list_remove(&it[1].link);
    expect_values(&h, (int[]){0, 2}, 2);
    cr_assert(kv_list_empty(&it[1].link));
    kv_list_remove(&it[0].link);
    kv_list_remove(&it[2].link);
    kv_list_remove(&it[0].link);
    cr_assert(kv_list_empty(&h));
}

Test(list, move_splices_onto_the_tail_and_empties_the_source)
{
    kv_list a, b;
    kv_list_init(&a);
    kv_list_init(&b);
    item it[6];
    init_items(it, 6);
    for (int i = 0; i < 3; i++)
        kv_list_insert_tail(&a, &it[i].link);
    for (int i = 3; i < 6; i++)
        kv_list_insert_tail(&b, &it[i].link);
    kv_list_move(&b, &a);
    cr_assert(kv_list_empty(&b));
    expect_values(&a, (int[]){0, 1, 2, 3, 4, 5}, 6);
    kv_list_move(&b, &a); /* an empty source: nothing changes */
    expect_values(&a, (int[]){0, 1, 2, 3, 4, 5}, 6);
    cr_assert(kv_list_empty(&b));
    kv_list_move(&a, &b); /* onto an empty list */
    cr_assert(kv_list_empty(&a));
    expect_values(&b, (int[]){0, 1, 2, 3, 4, 5}, 6);
    kv_list_remove(&it[5].link); /* the last one still unlinks right after the moves */
    kv_list_remove(&it[0].link);
    expect_values(&b, (int[]){1, 2, 3, 4}, 4);
    kv_list_insert_tail(&b, &it[0].link);
    expect_values(&b, (int[]){1, 2, 3, 4, 0}, 5);
}

Test(list, safe_foreach_may_remove_the_current_element)
{
    kv_list h, odd;
    kv_list_init(&h);
    kv_list_init(&odd);
    item it[7];
    init_items(it, 7);
    for (int i = 0; i < 7; i++)
        kv_list_insert_tail(&h, &it[i].link);
    kv_list *e, *tmp;
    int seen = 0;
    kv_list_foreach_safe(e, tmp, &h) {
        item *x = kv_list_data(e, item, link);
        cr_assert_eq(x->v, seen++, "each element once, in order");
        if (x->v % 2) {
            kv_list_remove(e);
            kv_list_insert_tail(&odd, e); /* and put on another list at once */
        }
    }
    cr_assert_eq(seen, 7);
    expect_values(&h, (int[]){0, 2, 4, 6}, 4);
    expect_values(&odd, (int[]){1, 3, 5}, 3);
    /* removing every element empties the list */
    kv_list_foreach_safe(e, tmp, &h)
        kv_list_remove(e);
    cr_assert(kv_list_empty(&h));
    for (int i = 0; i < 7; i += 2)
        cr_assert(kv_list_empty(&it[i].link));
}

Test(list, an_element_on_two_lists_through_two_links)
{
    kv_list h1, h2;
    kv_list_init(&h1);
    kv_list_init(&h2);
    item it[3];
    init_items(it, 3);
    for (int i = 0; i < 3; i++) {
        kv_list_insert_tail(&h1, &it[i].link);
        kv_list_insert_head(&h2, &it[i].other);
    }
    kv_list_remove(&it[1].link); /* leaves the first list only */
    expect_values(&h1, (int[]){0, 2}, 2);
    int order[3], n = 0;
    kv_list *e;
    kv_list_foreach(e, &h2)
        order[n++] = kv_list_data(e, item, other)->v;
    cr_assert_eq(n, 3);
    cr_expect(order[0] == 2 && order[1] == 1 && order[2] == 0);
}
