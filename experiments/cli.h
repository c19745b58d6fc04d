/* A table-driven long-option parser for the experiment binaries.
 * Every flag is validated (type, range, choice); parsing never exits, so the
 * parser can be tested and fuzzed; the binaries print the message and usage
 * and exit 2. Accepts "--name value" and "--name=value". */
#ifndef TG_CLI_H
#define TG_CLI_H
#include <stddef.h>
#include <stdio.h>

typedef enum { CLI_INT, CLI_FLOAT, CLI_STR, CLI_CHOICE, CLI_FLAG } cli_kind;

typedef struct {
    const char *name;             /* without the leading "--" */
    cli_kind kind;
    void *ptr;                    /* int*, float*, const char**, int* (choice index), int* (flag) */
    double lo, hi;                /* inclusive range for CLI_INT / CLI_FLOAT */
    const char *const *choices;   /* NULL-terminated, for CLI_CHOICE */
    const char *help;
} cli_opt;

enum { CLI_OK = 0, CLI_HELP = 1, CLI_ERROR = 2 };

/* Fills the options' targets from argv. On CLI_ERROR, err holds a message that
 * names the flag and the bad value. CLI_HELP: --help was given. The caller's
 * defaults stay wherever a flag is absent. `seen`, if not NULL, gets 1 for each
 * option given on the command line. */
int cli_parse(const cli_opt *opts, int n, int argc, char **argv, char *err, size_t errlen, int *seen);
void cli_usage(FILE *f, const char *prog, const char *summary, const cli_opt *opts, int n);
/* Writes "# name=value" lines for every option but the CLI_FLAG switches
 * (the log's configuration), the name with '-' as '_'. */
void cli_dump(FILE *f, const cli_opt *opts, int n);
/* An option's current value as cli_dump writes it ("" for an unset string). */
void cli_value(const cli_opt *o, char *buf, size_t len);
/* The option named `name` (without "--"), or NULL. */
const cli_opt *cli_find(const cli_opt *opts, int n, const char *name);

#endif
