/* placeholder: being written */
#include "cli.h"

int cmd_soak(cli *c, int argc, char **argv)
{
    cli_error("soak: not built yet");
    return EXIT_USAGE;
}
