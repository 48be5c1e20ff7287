/* placeholder: being written */
#include "cli.h"

int cmd_compare(cli *c, int argc, char **argv)
{
    cli_error("compare: not built yet");
    return EXIT_USAGE;
}
