# Sourced by the recipes: their settings from three places, the first that sets a name winning:
#   1. the environment (NAME=value scripts/recipes/RECIPE.sh ...: how every earlier command line set them);
#   2. CONFIG, a user's file of NAME=value lines (e.g. CONFIG=my.env scripts/recipes/RECIPE.sh OUT);
#   3. the recipe's defaults, scripts/recipes/configs/RECIPE.env, each with its comment.
# Both files hold NAME=value lines, blank lines and # comments; a value is the rest of its line, literal (no $
# expansion), one pair of surrounding quotes removed. A name that the defaults file does not hold is refused
# (a mistyped setting would otherwise run the default recipe). A default left empty there is computed by the
# recipe (its comment says how) and is not set here. A name with a non-empty default must not be set empty,
# except the names given after the recipe's name, for which empty means something (e.g. CURVE_STEPS: no curve).

config_lines() {  # FILE: "LINE NAME VALUE" for each setting of FILE, or an Error naming the line
    local file=$1 n=0 line name value
    while IFS= read -r line || [ -n "$line" ]; do
        n=$((n + 1))
        [[ $line =~ ^[[:space:]]*(#.*)?$ ]] && continue
        [[ $line =~ ^([A-Z][A-Z0-9_]*)=(.*)$ ]] ||
            { echo "Error: $file line $n: expected NAME=value, got '$line'" >&2; return 2; }
        name=${BASH_REMATCH[1]} value=${BASH_REMATCH[2]}
        [[ $value =~ ^\"(.*)\"$ || $value =~ ^\'(.*)\'$ ]] && value=${BASH_REMATCH[1]}
        printf '%s\t%s\t%s\n' "$n" "$name" "$value"
    done < "$file"
}

load_config() {  # RECIPE [NAME...]: set the recipe's settings; NAMEs may be set empty
    local defaults n name value known=" " lines
    defaults=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/configs/$1.env
    shift
    lines=$(config_lines "$defaults") || exit 2
    while IFS=$'\t' read -r n name value; do known+="$name "; done <<< "$lines"
    if [ -n "${CONFIG:-}" ]; then
        [ -f "$CONFIG" ] || { echo "Error: CONFIG file $CONFIG not found" >&2; exit 2; }
        CONFIG=$(cd "$(dirname "$CONFIG")" && pwd)/$(basename "$CONFIG")  # a recipe that calls itself may cd
        export CONFIG
        lines=$(config_lines "$CONFIG") || exit 2
        while IFS=$'\t' read -r n name value; do
            [ -n "$name" ] || continue
            [[ $known == *" $name "* ]] ||
                { echo "Error: $CONFIG line $n: unknown setting $name (the settings:$known)" >&2; exit 2; }
            [[ -v $name ]] || printf -v "$name" '%s' "$value"
        done <<< "$lines"
    fi
    lines=$(config_lines "$defaults")
    while IFS=$'\t' read -r n name value; do
        [ -n "$value" ] || continue  # computed by the recipe
        [[ -v $name ]] || printf -v "$name" '%s' "$value"
        [ -n "${!name}" ] || [[ " $* " == *" $name "* ]] ||
            { echo "Error: $name is set empty; unset it for its default ($value)" >&2; exit 2; }
    done <<< "$lines"
}

check_processes() {  # NAME...: counts of processes (or loader workers) a recipe starts at once: whole numbers from
    # 1 to the machine's ceiling, twice its cores and at least 4, as berttrain and bertprep have it
    # (bertstream.cli.machine): PARALLEL=1000 started a thousand fine-tuning runs at once.
    # (A recipe that stops before it starts them checks only that they are counts: data prepared on a small
    # machine for a larger one.) nproc counts the cores this process may use, not OMP_NUM_THREADS.
    local v n cores ceiling
    cores=$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc 2>/dev/null || echo 1)
    ceiling=$((2 * cores > 4 ? 2 * cores : 4))
    for v; do
        n=${!v}
        [[ $n =~ ^[0-9]+$ ]] && [[ ! $n =~ ^0+$ ]] ||
            { echo "Error: $v must be a whole number >= 1, got '$n'" >&2; exit 2; }
        [ -z "${COUNTS_ONLY:-}" ] || continue
        [ "${#n}" -le 6 ] && [ "$((10#$n))" -le "$ceiling" ] ||
            { echo "Error: $v=$n is more than this machine runs: at most $ceiling (2 per core, $cores cores)" >&2; exit 2; }
    done
}

check_numbers() {  # LOW HIGH NAME...: each word of each NAME a decimal number x with LOW < x <= HIGH, as the
    # commands take them (--lr > 0, --mlm-probability below 1, --layer-decay in (0, 1]), checked before minutes of
    # data and training: LR=0 passed the recipe's own check and failed at the first berttrain, after the data.
    local low=$1 high=$2 v w
    shift 2
    for v; do
        for w in ${!v}; do
            [[ $w =~ ^[0-9]*[.]?[0-9]+([eE][-+]?[0-9]+)?$ ]] && awk -v x="$w" -v lo="$low" -v hi="$high" \
                'BEGIN { exit !(x + 0 > lo + 0 && x + 0 <= hi + 0) }' ||
                { echo "Error: $v must be numbers above $low and at most $high, got '${!v}'" >&2; exit 2; }
        done
    done
}
