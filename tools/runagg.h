/* runagg.h moved to report/ (the report model library): this name stays for
 * the tools and tests that include it. */
#include "report/runagg.h"
