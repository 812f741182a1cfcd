#include <math.h>
#include <pthread.h>

#include "rans/rans.h"

/* Derived from the normative table alone, so one copy serves every handle;
 * written once under pthread_once, constant after. */
static struct {
    pthread_once_t once;
    qem_rans_tables tables;
} shared = {.once = PTHREAD_ONCE_INIT};

static void shared_init(void)
{
    qem_rans_tables_init(&shared.tables);
}

const qem_rans_tables *qem_rans_tables_shared(void)
{
    pthread_once(&shared.once, shared_init);
    return &shared.tables;
}

void qem_rans_tables_init(qem_rans_tables *t)
{
    for (unsigned m = 0; m < QEM_RANS_MODELS; m++) {
        uint32_t start = 0;
        for (unsigned s = 0; s < QEM_RANS_SYMBOLS; s++) {
            uint32_t freq = qem_rans_frequencies[m][s];
            t->start[m][s] = (uint16_t)start;
            for (uint32_t slot = start; slot < start + freq; slot++)
                t->slot[m][slot] = freq | ((slot - start) << 11) | ((uint32_t)s << 21);
            double bits = log2((double)QEM_RANS_SCALE / (double)freq);
            if (s == QEM_RANS_ESCAPE)
                bits += 16.0;
            t->cost[m][s] = (uint32_t)lrint(bits * 65536.0);
            t->cost_by_symbol[s][m] = t->cost[m][s];
            t->encode[m][s] = freq | start << 16;
            start += freq;
        }
        unsigned head = QEM_RANS_SYMBOLS;
        while (head > 0 && qem_rans_frequencies[m][head - 1] == 1)
            head--;
        t->head[m] = (uint8_t)head;
    }
    for (uint32_t c = 0; c <= QEM_STREAM_MAX_SAMPLES * QEM_RANS_ESCAPE; c++)
        t->reference_model_512[c] = (uint8_t)qem_reference_rans_model_of_sum(c, 512);
}
