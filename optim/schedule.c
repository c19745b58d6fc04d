/* Linear warm-up, then cosine decay to lr_min. */
#include "tg_optim.h"

#include <math.h>

static const double PI = 3.14159265358979323846;   /* M_PI is not in strict C11 */

float tg_lr_schedule(int step, int warmup, int total, float lr_max, float lr_min) {
    /* no tg_params here to carry a handler: NULL prints the message and aborts */
    if (step < 0) tg_fail_h(NULL, "tg_lr_schedule: step %d is negative", step);
    if (warmup < 0) tg_fail_h(NULL, "tg_lr_schedule: warmup %d is negative", warmup);
    if (total < warmup) tg_fail_h(NULL, "tg_lr_schedule: total %d < warmup %d", total, warmup);
    if (!(lr_min >= 0.0f && lr_min <= lr_max && isfinite(lr_max)))
        tg_fail_h(NULL, "tg_lr_schedule: need 0 <= lr_min <= lr_max (finite), got lr_min %g, lr_max %g",
                  lr_min, lr_max);
    if (step < warmup) return (float)((double)lr_max * (step + 1) / warmup);
    if (step >= total) return lr_min;
    double p = (double)(step - warmup) / (total - warmup);
    return (float)(lr_min + ((double)lr_max - lr_min) * 0.5 * (1.0 + cos(PI * p)));
}
