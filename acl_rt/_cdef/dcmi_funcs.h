/* canna: DCMI function prototypes (libdcmi.so; on the simulator, libascendcl_sim.so exports them).
 * @cann-headers: dcmi_interface_api.h
 *
 * Exact prototypes of the driver's dcmi_interface_api.h (hicann/driver
 * src/custom/include/dcmi_interface_api.h; also torch_npu's third_party/dcmi/inc/). They need no aclInit and no device
 * context, and they see every process using a device: what npu-smi and npu-exporter read.
 * dcmi_get_device_resource_info: canna passes the capacity of proc_info in *proc_num (as other
 * DCMI callers do) and gets the number of entries filled back.
 */
int dcmi_init(void);
int dcmi_get_card_num_list(int *card_num, int *card_list, int list_len);
int dcmi_get_device_num_in_card(int card_id, int *device_num);
int dcmi_get_device_logic_id(int *device_logic_id, int card_id, int device_id);
int dcmi_get_card_id_device_id_from_logicid(int *card_id, int *device_id, unsigned int device_logic_id);
int dcmi_get_device_utilization_rate(int card_id, int device_id, int input_type, unsigned int *utilization_rate);
int dcmi_get_device_memory_info_v3(int card_id, int device_id, struct dcmi_get_memory_info_stru *memory_info);
int dcmi_get_device_hbm_info(int card_id, int device_id, struct dcmi_hbm_info *hbm_info);
int dcmi_get_device_temperature(int card_id, int device_id, int *temperature);
int dcmi_get_device_power_info(int card_id, int device_id, int *power);
int dcmi_get_device_health(int card_id, int device_id, unsigned int *health);
int dcmi_get_device_chip_info(int card_id, int device_id, struct dcmi_chip_info *chip_info);
int dcmi_get_device_resource_info(int card_id, int device_id, struct dcmi_proc_mem_info *proc_info, int *proc_num);
