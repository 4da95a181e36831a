/* CPU tests.
 *
 * dhry2reg: an integer "statement mix" in the spirit of Dhrystone
 * (Weicker 1984): record copies through pointers, an enumeration switch,
 * 30-character string copy and compare, one- and two-dimensional array
 * updates, small procedure calls and integer arithmetic; no floating
 * point. One loop of the mix is one "loop"; the unit is loops per second
 * (lps). Written for this suite: its loop is not Dhrystone's loop, so the
 * absolute numbers differ from Dhrystone's.
 *
 * whetstone-double: the classic Whetstone module set (Curnow & Wichmann
 * 1976) in double precision: simple variables, array elements, an array
 * as a parameter, conditional jumps, integer arithmetic, trigonometric
 * functions, procedure calls, array references and standard functions
 * (sqrt, exp, log), each repeated by the classic module weights so that
 * one loop counts as one million Whetstone instructions; the unit is
 * millions of Whetstone instructions per second (MWIPS). */
#include <math.h>
#include <string.h>

#include "ubench.h"

/* ---- dhry2reg-style integer mix ---------------------------------------- */

enum shade { SHADE_RED, SHADE_GREEN, SHADE_BLUE, SHADE_GREY, SHADE_BLACK };

struct record {
    struct record *link;
    enum shade shade;
    int number;
    int weight;
    char label[31];
};

static struct record rec_first, rec_second;
static struct record *rec_head;
static int grid1[64];
static int grid2[64][64];
static int g_int;
static int g_flag;
static char g_char_a, g_char_b;
static char text_one[31], text_two[31];
volatile long ub_int_sink;

static __attribute__((noinline)) enum shade next_shade(enum shade s, int salt)
{
    switch (s) {
    case SHADE_RED:
        return salt > 100 ? SHADE_GREEN : SHADE_GREY;
    case SHADE_GREEN:
        return SHADE_BLUE;
    case SHADE_BLUE:
        return g_int > 100 ? SHADE_GREY : SHADE_BLACK;
    case SHADE_GREY:
        return SHADE_RED;
    default:
        return SHADE_BLUE;
    }
}

static __attribute__((noinline)) int char_match(char a, char b)
{
    char x = a;
    if (x != b)
        return 0;
    g_char_a = x;
    return 1;
}

static __attribute__((noinline)) int texts_differ(const char *a, const char *b)
{
    int i = 2;
    while (i <= 2)
        if (char_match(a[i], b[i + 1]) == 0)
            i++;
        else
            g_char_b = 'A';
    if (strcmp(a, b) > 0) {
        g_int = i + 7;
        return 1;
    }
    return 0;
}

static __attribute__((noinline)) void add_step(int a, int b, int *out)
{
    int t = a + 2;
    *out = b + t;
}

static __attribute__((noinline)) void fill_grids(int base, int value)
{
    int k = base + 5;
    grid1[k] = value;
    grid1[k + 1] = grid1[k];
    grid1[k + 30] = k;
    for (int i = k; i <= k + 1; i++)
        grid2[k][i] = k;
    grid2[k][k - 1] += 1;
    grid2[k + 20][k] = grid1[k];
    g_int = 5;
}

static __attribute__((noinline)) void bump(int *v)
{
    if (g_char_a == 'A') {
        *v = *v + 9 - g_int;
        g_flag = 1;
    }
}

static __attribute__((noinline)) void touch_record(struct record *r)
{
    struct record *next = r->link;
    *next = *rec_head;
    r->weight = 5;
    next->weight = r->weight;
    next->link = r->link;
    if (next->shade == SHADE_RED) {
        next->weight = 6;
        next->shade = next_shade(r->shade, r->number);
        next->link = rec_head->link;
        add_step(next->weight, 10, &next->weight);
    } else {
        *r = *next;
    }
}

int ub_test_dhry2reg(const struct ub_opts *o, struct ub_result *res)
{
    rec_head = &rec_first;
    rec_first.link = &rec_second;
    rec_first.shade = SHADE_RED;
    rec_first.number = 40;
    rec_first.weight = 2;
    strcpy(rec_first.label, "PACER INTEGER MIX, RECORD TEXT");
    strcpy(text_one, "PACER INTEGER MIX, FIRST TEXT.");
    grid2[8][7] = 10;

    unsigned long loops = 0;
    ub_arm_timer(o->seconds);
    double t0 = ub_now();
    while (!ub_stop) {
        int a = 2, b = 3, c = 0;
        enum shade s;
        strcpy(text_two, "PACER INTEGER MIX, OTHER TEXT.");
        g_char_a = 'A';
        g_flag = !texts_differ(text_one, text_two);
        while (a < b) {
            c = 5 * a - b;
            add_step(a, b, &c);
            a++;
        }
        fill_grids(a, c);
        touch_record(rec_head);
        s = SHADE_GREEN;
        for (char ch = 'A'; ch <= 'C'; ch++)
            if (char_match(ch, 'C'))
                s = next_shade(SHADE_RED, (int)loops & 255);
        b = b * a;
        c = b / a;
        b = 7 * (b - c) - a;
        bump(&a);
        ub_int_sink += a + b + c + (int)s + g_flag;
        loops++;
    }
    double el = ub_now() - t0;
    ub_disarm_timer();
    res->count = (double)loops;
    res->seconds = el;
    res->score = (double)loops / el;
    return 0;
}

/* ---- whetstone-double-style floating-point modules ---------------------- */

static double wt_t = 0.499975, wt_t1 = 0.50025, wt_t2 = 2.0;
static double wt_e1[4];
static int wt_j, wt_k, wt_l;
volatile double ub_fp_sink;

static void wt_pa(double e[4])
{
    for (int j = 0; j < 6; j++) {
        e[0] = (e[0] + e[1] + e[2] - e[3]) * wt_t;
        e[1] = (e[0] + e[1] - e[2] + e[3]) * wt_t;
        e[2] = (e[0] - e[1] + e[2] + e[3]) * wt_t;
        e[3] = (-e[0] + e[1] + e[2] + e[3]) / wt_t2;
    }
}

static __attribute__((noinline)) void wt_p3(double x, double y, double *z)
{
    double x1 = wt_t * (x + y);
    double y1 = wt_t * (x1 + y);
    *z = (x1 + y1) / wt_t2;
}

static __attribute__((noinline)) void wt_p0(void)
{
    wt_e1[wt_j] = wt_e1[wt_k];
    wt_e1[wt_k] = wt_e1[wt_l];
    wt_e1[wt_l] = wt_e1[wt_j];
}

/* One loop = 10^6 Whetstone instructions: module repeat counts are the
 * classic weights (12, 14, 345, 210, 32, 899, 616, 93) times 10. */
static void whetstone_loop(void)
{
    const int n2 = 120, n3 = 140, n4 = 3450, n6 = 2100, n7 = 320, n8 = 8990, n9 = 6160,
              n11 = 930;
    double x1, x2, x3, x4, x, y, z;

    /* module 2: array elements */
    wt_e1[0] = 1.0;
    wt_e1[1] = wt_e1[2] = wt_e1[3] = -1.0;
    for (int i = 0; i < n2; i++) {
        wt_e1[0] = (wt_e1[0] + wt_e1[1] + wt_e1[2] - wt_e1[3]) * wt_t;
        wt_e1[1] = (wt_e1[0] + wt_e1[1] - wt_e1[2] + wt_e1[3]) * wt_t;
        wt_e1[2] = (wt_e1[0] - wt_e1[1] + wt_e1[2] + wt_e1[3]) * wt_t;
        wt_e1[3] = (-wt_e1[0] + wt_e1[1] + wt_e1[2] + wt_e1[3]) * wt_t;
    }
    /* module 3: array as parameter */
    for (int i = 0; i < n3; i++)
        wt_pa(wt_e1);
    /* module 4: conditional jumps */
    wt_j = 1;
    for (int i = 0; i < n4; i++) {
        wt_j = wt_j == 1 ? 2 : 3;
        wt_j = wt_j > 2 ? 0 : 1;
        wt_j = wt_j < 1 ? 1 : 0;
    }
    /* module 6: integer arithmetic */
    wt_j = 1;
    wt_k = 2;
    wt_l = 3;
    for (int i = 0; i < n6; i++) {
        wt_j = wt_j * (wt_k - wt_j) * (wt_l - wt_k);
        wt_k = wt_l * wt_k - (wt_l - wt_j) * wt_k;
        wt_l = (wt_l - wt_k) * (wt_k + wt_j);
        wt_e1[(wt_l - 2) & 3] = wt_j + wt_k + wt_l;
        wt_e1[(wt_k - 2) & 3] = wt_j * wt_k * wt_l;
    }
    /* module 7: trigonometric functions */
    x = y = 0.5;
    for (int i = 0; i < n7; i++) {
        x = wt_t * atan(wt_t2 * sin(x) * cos(x) / (cos(x + y) + cos(x - y) - 1.0));
        y = wt_t * atan(wt_t2 * sin(y) * cos(y) / (cos(x + y) + cos(x - y) - 1.0));
    }
    /* module 8: procedure calls */
    x = y = z = 1.0;
    for (int i = 0; i < n8; i++)
        wt_p3(x, y, &z);
    /* module 9: array references */
    wt_j = 0;
    wt_k = 1;
    wt_l = 2;
    wt_e1[0] = 1.0;
    wt_e1[1] = 2.0;
    wt_e1[2] = 3.0;
    for (int i = 0; i < n9; i++)
        wt_p0();
    /* module 11: standard functions */
    x = 0.75;
    for (int i = 0; i < n11; i++)
        x = sqrt(exp(log(x) / wt_t1));
    /* module 1 (simple identifiers) has weight 0 in the classic mix, kept
     * as one pass so its statements exist and feed the sink */
    x1 = 1.0;
    x2 = x3 = x4 = -1.0;
    x1 = (x1 + x2 + x3 - x4) * wt_t;
    ub_fp_sink = x + y + z + x1 + wt_e1[0] + wt_e1[3] + wt_j + wt_k + wt_l;
}

int ub_test_whetstone(const struct ub_opts *o, struct ub_result *res)
{
    unsigned long loops = 0;
    ub_arm_timer(o->seconds);
    double t0 = ub_now();
    while (!ub_stop) {
        whetstone_loop();
        loops++;
    }
    double el = ub_now() - t0;
    ub_disarm_timer();
    res->count = (double)loops;
    res->seconds = el;
    res->score = (double)loops / el; /* one loop = 1 MWI */
    return 0;
}
