/* placeholder: being written */
#include "cli.h"

int cmd_sweep(cli *c, int argc, char **argv)
{
    cli_error("sweep: not built yet");
    return EXIT_USAGE;
}

int cmd_trial(cli *c, int argc, char **argv)
{
    cli_error("__trial: not built yet");
    return EXIT_USAGE;
}
