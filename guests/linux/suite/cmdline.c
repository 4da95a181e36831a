/* `ubench cmdline KEY [FILE]`: print the value of KEY=VALUE from a kernel
 * command line (default /proc/cmdline), so the init script need not parse
 * it in shell. Words are separated by spaces; double quotes protect
 * spaces (`ub.user_cmd="./Run -c 1"`) and are removed, as the kernel
 * itself does. The last occurrence wins. Exit 0 if found, 1 if not, 2 on
 * errors. A bare KEY (no '=') prints an empty value. */
#include <stdio.h>
#include <string.h>

#include "ubench.h"

int ub_cmdline_main(int argc, char **argv)
{
    if (argc < 3 || argc > 4) {
        fprintf(stderr, "usage: ubench cmdline KEY [FILE]\n");
        return 2;
    }
    const char *key = argv[2];
    const char *file = argc == 4 ? argv[3] : "/proc/cmdline";
    FILE *f = fopen(file, "r");
    if (!f) {
        fprintf(stderr, "ubench: cannot read %s\n", file);
        return 2;
    }
    static char line[8192], word[8192], found[8192];
    size_t len = fread(line, 1, sizeof line - 1, f);
    fclose(f);
    line[len] = 0;

    int have = 0;
    size_t i = 0, keylen = strlen(key);
    while (i < len) {
        while (i < len && (line[i] == ' ' || line[i] == '\n' || line[i] == '\t'))
            i++;
        if (i >= len)
            break;
        size_t w = 0;
        int quoted = 0;
        while (i < len && (quoted || (line[i] != ' ' && line[i] != '\n' && line[i] != '\t'))) {
            if (line[i] == '"')
                quoted = !quoted;
            else if (w < sizeof word - 1)
                word[w++] = line[i];
            i++;
        }
        word[w] = 0;
        if (strncmp(word, key, keylen) == 0 && (word[keylen] == '=' || word[keylen] == 0)) {
            snprintf(found, sizeof found, "%s", word[keylen] == '=' ? word + keylen + 1 : "");
            have = 1;
        }
    }
    if (!have)
        return 1;
    printf("%s\n", found);
    return 0;
}
