mod zygote;
