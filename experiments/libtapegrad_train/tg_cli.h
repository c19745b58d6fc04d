/* A table-driven long-option parser for the experiment binaries.
 * Every flag is validated (type, range, choice); parsing never exits, so the
 * parser can be tested and fuzzed; the binaries print the message and usage
 * and exit 2. Accepts "--name value" and "--name=value". */
#ifndef TG_CLI_H
#define TG_CLI_H
#include <stddef.h>
#include <stdio.h>

/* TG_CLI_FLAG: a switch of the invocation (--overwrite), not recorded;
 * TG_CLI_SWITCH: a switch that is a setting of the run (--alibi): 1 when given;
 * "--alibi 0", "--alibi 1" and "--alibi=0|1" say it explicitly (a sweep writes
 * every setting as a value); recorded (log header, checkpoint) as 0 or 1. */
typedef enum { TG_CLI_INT, TG_CLI_FLOAT, TG_CLI_STR, TG_CLI_CHOICE, TG_CLI_FLAG, TG_CLI_SWITCH } tg_cli_kind;

typedef struct {
    const char *name;             /* without the leading "--" */
    tg_cli_kind kind;
    void *ptr;                    /* int*, float*, const char**, int* (choice index), int* (flag) */
    double lo, hi;                /* inclusive range for TG_CLI_INT / TG_CLI_FLOAT */
    const char *const *choices;   /* NULL-terminated, for TG_CLI_CHOICE */
    const char *help;
} tg_cli_opt;

enum { TG_CLI_OK = 0, TG_CLI_HELP = 1, TG_CLI_ERROR = 2 };

/* Fills the options' targets from argv. On TG_CLI_ERROR, err holds a message that
 * names the flag and the bad value. TG_CLI_HELP: --help was given. The caller's
 * defaults stay wherever a flag is absent. `seen`, if not NULL, gets 1 for each
 * option given on the command line. */
int tg_cli_parse(const tg_cli_opt *opts, int n, int argc, char **argv, char *err, size_t errlen, int *seen);
void tg_cli_usage(FILE *f, const char *prog, const char *summary, const tg_cli_opt *opts, int n);
/* Writes "# name=value" lines for every option but the TG_CLI_FLAG switches
 * (the log's configuration), the name with '-' as '_'. */
void tg_cli_dump(FILE *f, const tg_cli_opt *opts, int n);

/* Flags added after runs were recorded: "name=value" strings (NULL-terminated),
 * the value every earlier run had. While a flag holds that value it is written
 * neither in a log header nor in a checkpoint, so the logs and checkpoints of
 * earlier versions stay this run's; a record without it reads as that value. */
/* The value a record without flag `name` has, or NULL when `name` is not in added. */
const char *tg_cli_added_value(const char *const *added, const char *name);
/* 1 if o is one of `added` and holds its earlier value: not recorded. */
int tg_cli_unrecorded(const tg_cli_opt *o, const char *const *added);
/* tg_cli_dump without the unrecorded flags. */
void tg_cli_dump_added(FILE *f, const tg_cli_opt *opts, int n, const char *const *added);
/* An option's current value as tg_cli_dump writes it ("" for an unset string). */
void tg_cli_value(const tg_cli_opt *o, char *buf, size_t len);
/* The option named `name` (without "--"), or NULL. */
const tg_cli_opt *tg_cli_find(const tg_cli_opt *opts, int n, const char *name);

/* What a program reads at start besides its flags: the product plan (tg_gemm_plan.h) from the
 * variable TG_PLAN, or dflt when it is unset or empty; "measure" is kept in the machine's plan
 * folder, $TG_PLAN_DIR, else $XDG_CACHE_HOME/tapegrad, else $HOME/.cache/tapegrad (the one place
 * that reads those variables: the libraries below never do). The plan's notes, and a TG_PLAN that
 * fails ("PROG: TG_PLAN: ...; estimating every product instead"), go to stderr as "PROG: ...": the
 * program asked. 0, or -1 (the products are then estimated). prog must outlive the process's products. */
int tg_gemm_plan_setup_env(const char *prog, const char *dflt);

#endif
