/* placeholder: being written */
#include "cli.h"

int cmd_profile(cli *c, int argc, char **argv)
{
    cli_error("profile: not built yet");
    return EXIT_USAGE;
}
